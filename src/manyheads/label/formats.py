"""Writing labelled rows in JSONL (gzipped too), CSV / TSV or Parquet: one part (a chunk's
rows, read by :mod:`manyheads.data.tables`) as bytes, parts joined into one file.

A row keeps every column it came with. The answers go after them: in JSONL one
object per head as ``predict`` gives it; in CSV and Parquet two flat columns per head,
``HEAD`` (the label; for a multilabel or hierarchical head the list of labels) and
``HEAD_score`` (its probability; for those heads the list of the labels'), typed in
Parquet (string and float32, or lists of them) and written as JSON text in CSV for the
lists. Labels are written as text in CSV and Parquet.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._text import without_surrogates
from ..data.tables import DELIMITERS
from ..errors import DataError, require

__all__ = [
    "Columns",
    "answer_cells",
    "arrow_schema",
    "head_fields",
    "header",
    "json_line",
    "render_part",
    "writable",
]


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


def writable(value: Any) -> Any:
    """A value UTF-8 can hold, however deep: each lone surrogate (of a row refused for
    it, or for a byte that is not UTF-8) becomes U+FFFD."""
    if isinstance(value, str):
        return without_surrogates(value)
    if isinstance(value, list):
        return [writable(v) for v in value]
    if isinstance(value, dict):
        return {writable(k): writable(v) for k, v in value.items()}
    return value


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
        out = {c: writable((row or {}).get(c)) for c in columns.inputs}
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
        values = [writable(r.get(name)) for r in sample]
        try:
            kind = pa.array(values).type if any(v is not None for v in values) else pa.string()
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DataError(
                f"the input column {name!r} mixes types Parquet cannot hold in one column "
                f"({exc}); write JSONL or CSV instead"
            ) from None
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
