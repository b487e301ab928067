"""Reading rows from JSONL (gzipped too), CSV / TSV and Parquet a chunk at a time, and
writing labelled rows back in any of them: one part (a chunk's rows) as bytes, parts
joined into one file.

A row keeps every column it came with. The answers go after them: in JSONL one
object per head as ``predict`` gives it; in CSV and Parquet two flat columns per head,
``HEAD`` (the label; for a multilabel or hierarchical head the list of labels) and
``HEAD_score`` (its probability; for those heads the list of the labels'), typed in
Parquet (string and float32, or lists of them) and written as JSON text in CSV for the
lists. Labels are written as text in CSV and Parquet.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._text import without_surrogates
from ..errors import ConfigError, DataError, one_of, require

__all__ = [
    "FORMATS",
    "Chunk",
    "Columns",
    "answer_cells",
    "format_of",
    "head_fields",
    "input_files",
    "json_line",
    "no_input",
    "read_chunks",
    "readable",
    "render_part",
]

FORMATS = ("jsonl", "csv", "tsv", "parquet")
DELIMITERS = {"csv": ",", "tsv": "\t"}
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}


def format_of(path: str | Path, given: str | None = None) -> str:
    """The format of ``path``: ``given``, else its extension (``.gz`` looked through)."""
    if given is not None:
        return one_of(given, FORMATS, "format")
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    found = _SUFFIXES.get(Path(name).suffix)
    if found is None:
        raise ConfigError(
            f"cannot tell the format of {path} from its name: name it .jsonl, .jsonl.gz, "
            ".csv, .tsv or .parquet, or give {format}",
            options=("format",),
        )
    return found


def readable(name: str) -> bool:
    """Whether a folder's file ``name`` is part of the input: not hidden, and of a known
    format."""
    if name.startswith("."):
        return False
    try:
        format_of(name)
    except ConfigError:
        return False
    return True


def no_input(path: Any, folder: bool) -> DataError:
    """The error for an input that is not there, or a folder with no file to read."""
    if folder:
        return DataError(f"{path} holds no .jsonl, .jsonl.gz, .csv, .tsv or .parquet file")
    return DataError(f"no such file or folder: {path}")


def input_files(path: str | Path) -> list[Path]:
    """The files to read: ``path`` itself, or the files of a folder (sorted by name, those
    :func:`readable`; each a part of the input)."""
    path = Path(path)
    if path.is_dir():
        files = [c for c in sorted(path.iterdir()) if c.is_file() and readable(c.name)]
        if not files:
            raise no_input(path, folder=True)
        return files
    if not path.is_file():
        raise no_input(path, folder=False)
    return [path]


@dataclass
class Chunk:
    """Rows read from one input file: ``rows`` (a dict each; ``None`` for a line that is
    no JSON object), their 1-based line or row numbers, and ``problems``: the reason a
    row is bad, by its position in the chunk."""

    rows: list[dict[str, Any] | None]
    numbers: list[int]
    problems: dict[int, str]


def _open_text(path: Path) -> IO[str]:
    if path.name.lower().endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


Read = tuple[dict[str, Any] | None, int, str]  # a row, its line / row number, its problem


def _in_chunks(read: Iterator[Read], size: int) -> Iterator[Chunk]:
    """The rows of ``read`` in chunks of ``size``."""
    chunk = Chunk([], [], {})
    for row, number, problem in read:
        if problem:
            chunk.problems[len(chunk.rows)] = problem
        chunk.rows.append(row)
        chunk.numbers.append(number)
        if len(chunk.rows) >= size:
            yield chunk
            chunk = Chunk([], [], {})
    if chunk.rows:
        yield chunk


def _jsonl(path: Path) -> Iterator[Read]:
    with _open_text(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                yield None, number, f"not JSON: {exc}"
                continue
            yield (
                (row, number, "") if isinstance(row, dict) else (None, number, "not a JSON object")
            )


def _delimited(path: Path, delimiter: str) -> Iterator[Read]:
    with _open_text(path) as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        for number, row in enumerate(reader, 2):  # line 1 is the header
            if None in row:  # more cells than the header names
                clean = {k: v for k, v in row.items() if k is not None}
                yield clean, number, "more cells than the header has columns"
            else:
                yield dict(row), number, ""


def _parquet(path: Path, size: int) -> Iterator[Chunk]:
    pq = require("pyarrow.parquet", "parquet")
    done = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=size):
        rows = batch.to_pylist()
        yield Chunk(rows, list(range(done + 1, done + len(rows) + 1)), {})
        done += len(rows)


def read_chunks(path: Path, fmt: str, size: int) -> Iterator[Chunk]:
    """The rows of ``path`` (``fmt``: its format) in chunks of ``size`` rows."""
    if fmt == "jsonl":
        return _in_chunks(_jsonl(path), size)
    if fmt in ("csv", "tsv"):
        return _in_chunks(_delimited(path, DELIMITERS[fmt]), size)
    return _parquet(path, size)


@dataclass
class Columns:
    """The columns of the output: the input's (from its first rows) and the heads'."""

    inputs: list[str]
    heads: list[str]
    lists: set[str]  # the heads answering a list of labels (multilabel, hierarchical)
    schema: Any = None  # Parquet: the pyarrow schema of the output

    def flat(self) -> list[str]:
        return [*self.inputs, *(c for h in self.heads for c in (h, f"{h}_score"))]


def answer_cells(answer: dict[str, Any] | None, columns: Columns) -> dict[str, Any]:
    """Each head's two flat cells, ``HEAD`` and ``HEAD_score``, of one row's ``answer``
    (None: a bad row, empty cells)."""
    cells = {}
    for head in columns.heads:
        one = None if answer is None else answer[head]
        cells[head], cells[f"{head}_score"] = _flat_answer(one, head in columns.lists)
    return cells


def _flat_answer(answer: dict[str, Any] | None, listed: bool) -> tuple[Any, Any]:
    if answer is None:
        return None, None
    if listed:
        labels = answer.get("labels", [])
        scores = answer.get("scores", {})
        return [str(v) for v in labels], [scores.get(v) for v in labels]
    label = answer.get("label")
    return (None if label is None else str(label)), answer.get("score")


def _writable(value: Any) -> Any:
    """A cell UTF-8 can hold: a lone surrogate (a row refused for it) becomes U+FFFD."""
    return without_surrogates(value) if isinstance(value, str) else value


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else value


def json_line(
    row: dict[str, Any] | None, answer: dict[str, Any] | None, heads: Sequence[str]
) -> str:
    """One JSONL output line: ``row`` with each head's answer as ``predict`` gives it."""
    out = dict(row or {})
    for head in heads:
        out[head] = None if answer is None else answer[head]
    line = json.dumps(out, ensure_ascii=False) + "\n"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a row refused for it): kept escaped
        line = json.dumps(out) + "\n"
    return line


def render_part(
    fmt: str,
    rows: Sequence[dict[str, Any] | None],
    answers: Sequence[dict[str, Any] | None],
    columns: Columns,
) -> bytes:
    """One part of the output: ``rows`` with their ``answers`` (``None``: a bad row, no
    answer), as bytes of ``fmt`` (CSV / TSV without a header: the file gets one)."""
    if fmt == "jsonl":
        lines = (json_line(r, a, columns.heads) for r, a in zip(rows, answers, strict=True))
        return "".join(lines).encode("utf-8")
    flat = []
    for row, answer in zip(rows, answers, strict=True):
        out = {c: _writable((row or {}).get(c)) for c in columns.inputs}
        flat.append(out | answer_cells(answer, columns))
    if fmt in ("csv", "tsv"):
        buf = io.StringIO()
        writer = csv.DictWriter(
            buf, fieldnames=columns.flat(), delimiter=DELIMITERS[fmt],
            lineterminator="\n", extrasaction="ignore",
        )  # fmt: skip
        for out in flat:
            writer.writerow({k: _csv_cell(v) for k, v in out.items()})
        return buf.getvalue().encode("utf-8")
    return _parquet_part(flat, columns)


def header(fmt: str, columns: Columns) -> bytes:
    """The first line of a CSV / TSV output (nothing for the other formats)."""
    if fmt not in ("csv", "tsv"):
        return b""
    buf = io.StringIO()
    csv.writer(buf, delimiter=DELIMITERS[fmt], lineterminator="\n").writerow(columns.flat())
    return buf.getvalue().encode("utf-8")


def arrow_schema(columns: Columns, sample: Sequence[dict[str, Any]]) -> Any:
    """The Parquet output's schema: the input columns' types as pyarrow reads them from
    ``sample`` (a column with no value there: text), the heads' typed."""
    pa = require("pyarrow", "parquet")
    fields = []
    for name in columns.inputs:
        values = [r.get(name) for r in sample]
        kind = pa.array(values).type if any(v is not None for v in values) else pa.string()
        fields.append(pa.field(name, pa.string() if pa.types.is_null(kind) else kind))
    return pa.schema([*fields, *head_fields(columns)])


def head_fields(columns: Columns) -> list[Any]:
    """The Arrow fields of the heads' flat columns: ``HEAD`` string and ``HEAD_score``
    float32, lists of them for a head answering a list of labels."""
    pa = require("pyarrow", "parquet")
    fields = []
    for head in columns.heads:
        label, score = pa.string(), pa.float32()
        if head in columns.lists:
            label, score = pa.list_(label), pa.list_(score)
        fields += [pa.field(head, label), pa.field(f"{head}_score", score)]
    return fields


def _parquet_part(flat: list[dict[str, Any]], columns: Columns) -> bytes:
    """A part as an Arrow IPC stream (the parts are joined into one Parquet file)."""
    pa = require("pyarrow", "parquet")
    assert columns.schema is not None
    try:
        table = pa.Table.from_pylist(flat, schema=columns.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataError(f"a row does not fit the output's column types: {exc}") from None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())
