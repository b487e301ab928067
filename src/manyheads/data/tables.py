"""The one reader of tables: JSONL (gzipped too), CSV / TSV and Parquet, a file or a
folder of them, as rows, each with its number and, for a bad row, the reason.

Reading never stops at a bad row: a line that is not valid UTF-8, not JSON (nested
too deep included) or not a JSON object, a CSV row with more cells than its header,
each comes with its problem, and the caller decides: training refuses the file at
its first bad row (:mod:`manyheads.data.dataset`), labelling keeps the row aside and
goes on (:mod:`manyheads.label`). A file that cannot be read as its format at all (a
``.gz`` that is not gzip, a binary file, a Parquet file that is not one, a stream cut
short) is one :class:`~manyheads.errors.DataError` line naming it, raised before its
first row where its first bytes tell.

Rows are numbered the way an editor finds them: JSONL, CSV and TSV by the line a row
starts on (a CSV's header is line 1), Parquet by its row, from 1 (:func:`where`).
Chunks of rows carry the SHA-256 of the input bytes they were read from, hashed as
they are read (a labelling job tells a part whose input changed from one it did).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from .._text import loads_json, one_line
from ..errors import ConfigError, DataError, one_of, require

__all__ = [
    "FORMATS",
    "Chunk",
    "Row",
    "check_file",
    "check_stream",
    "format_of",
    "input_files",
    "no_input",
    "read_chunks",
    "read_chunks_from",
    "read_lines",
    "read_rows",
    "readable",
    "suffix_format",
    "where",
]

FORMATS = ("jsonl", "csv", "tsv", "parquet")
DELIMITERS = {"csv": ",", "tsv": "\t"}
_NAMES = {",": "CSV", "\t": "TSV"}
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}
_KNOWN = ".jsonl, .jsonl.gz, .csv, .tsv or .parquet"
SNIFF_BYTES = 1 << 16  # what check_file reads of a file's start
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"


def format_of(path: str | Path, given: str | None = None, *, option: str = "format") -> str:
    """The format of ``path``: ``given`` (checked), else its extension (``.gz`` looked
    through). ``option``: the parameter that gives a format, named in the message."""
    if given is not None:
        return one_of(given, FORMATS, option)
    found = suffix_format(Path(path).name)
    if found is None:
        raise ConfigError(
            f"cannot tell the format of {path} from its name: name it {_KNOWN}, or give "
            f"{{{option}}}",
            options=(option,),
        )
    return found


def suffix_format(name: str) -> str | None:
    """The format a file's ``name`` says (``.gz`` looked through), or None."""
    name = name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return _SUFFIXES.get(Path(name).suffix)


def readable(name: str) -> bool:
    """Whether a folder's file ``name`` is part of the input: not hidden, and of a known
    format."""
    return not name.startswith(".") and suffix_format(name) is not None


def no_input(path: Any, folder: bool) -> DataError:
    """The error for an input that is not there, or a folder with no file to read."""
    if folder:
        return DataError(f"{path} holds no {_KNOWN} file")
    return DataError(f"no such file or folder: {path}")


def input_files(path: str | Path) -> list[Path]:
    """The files to read: ``path`` itself, or the files of a folder (sorted by name, those
    :func:`readable`; each a part of the input)."""
    path = Path(path)
    if path.is_dir():
        try:
            children = sorted(path.iterdir())
        except OSError as exc:
            raise DataError(f"cannot read the folder {path}: {exc.strerror or exc}") from None
        files = [c for c in children if c.is_file() and readable(c.name)]
        if not files:
            raise no_input(path, folder=True)
        return files
    if not path.is_file():
        raise no_input(path, folder=False)
    return [path]


def where(path: str | Path, fmt: str, number: int) -> str:
    """A row's place, as messages give it: ``FILE line N`` (``FILE row N``: Parquet)."""
    return f"{path} {'row' if fmt == 'parquet' else 'line'} {number}"


# -- the first bytes ----------------------------------------------------------------


def check_file(path: Path, fmt: str) -> None:
    """Refuse, in one line naming it, a file that cannot be read as ``fmt`` whatever its
    rows hold (:func:`check_stream`)."""
    try:
        with open(path, "rb") as fh:
            check_stream(fh, fmt, path)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None


def check_stream(fh: IO[bytes], fmt: str, name: str | Path) -> None:
    """Refuse, in one line naming it (``name``), an input (``fh``: seekable, at its start;
    left there) that cannot be read as ``fmt`` whatever its rows hold: a ``.gz`` that is
    not gzip (or a gzip file not named ``.gz``), a text format holding NUL bytes (a
    binary file) or Parquet's magic, a Parquet file without its magic or footer."""
    base = Path(str(name)).name
    gz = base.lower().endswith(".gz")
    start = fh.read(SNIFF_BYTES)
    fh.seek(0)
    if fmt == "parquet":
        _check_parquet(fh, name, start)
        return
    if gz and start and not start.startswith(_GZIP_MAGIC):
        raise DataError(f"cannot read {name}: its name ends in .gz but it is not gzip-compressed")
    if not gz and start.startswith(_GZIP_MAGIC):
        raise DataError(f"cannot read {name}: it is gzip-compressed; name it {base}.gz")
    if gz:
        try:
            start = gzip.GzipFile(fileobj=fh, mode="rb").read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"cannot read {name}: broken gzip ({exc})") from None
        finally:
            fh.seek(0)
    if start.startswith(_PARQUET_MAGIC):
        raise DataError(f"cannot read {name}: it is a Parquet file; name it .parquet")
    if b"\x00" in start:
        raise DataError(
            f"cannot read {name}: it holds NUL bytes, so it is not "
            f"{'plain' if fmt == 'text' else fmt.upper()} text (a binary file?)"
        )


def _check_parquet(fh: IO[bytes], name: str | Path, start: bytes) -> None:
    if not start.startswith(_PARQUET_MAGIC):
        raise DataError(f"cannot read {name}: not a Parquet file (it does not start with PAR1)")
    pq = require("pyarrow.parquet", "parquet")
    try:
        pq.ParquetFile(fh)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DataError(f"cannot read {name}: not a Parquet file ({one_line(exc)})") from None
    finally:
        fh.seek(0)


# -- rows ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One row: its ``number`` (:func:`where`), its ``record`` (``None``: a line that is no
    JSON object) and, for a bad row, its ``problem``."""

    number: int
    record: dict[str, Any] | None
    problem: str | None = None


class _Lines:
    """The lines of a text file as bytes, hashed as they are read (``take_digest``: the
    SHA-256 of the bytes read since the last call)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self._hash = hashlib.sha256()
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        for line in _split_lines(self._fh):
            self._hash.update(line)
            self.count += 1
            yield line

    def take_digest(self) -> str:
        digest, self._hash = self._hash.hexdigest(), hashlib.sha256()
        return digest


def _split_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``fh``, each with its ``\\n``: a Python file's own, else (a pyarrow
    file, which reads no lines) split here."""
    if isinstance(fh, io.BufferedReader | io.BytesIO | gzip.GzipFile):
        yield from fh
        return
    rest = b""
    while block := fh.read(1 << 20):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line + b"\n"
    if rest:
        yield rest


def _bad_byte(text: str) -> str | None:
    """Why ``text`` (decoded with ``surrogateescape``) was not valid UTF-8, or None."""
    for i, ch in enumerate(text):
        if "\udc80" <= ch <= "\udcff":
            return f"not valid UTF-8 (byte 0x{ord(ch) - 0xDC00:02X} at character {i})"
    return None


def _decode(line: bytes) -> tuple[str, str | None]:
    """``line`` as text, and why it is not valid UTF-8 (undecodable bytes kept as lone
    surrogates, so the rest of the row can still be read)."""
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError:
        text = line.decode("utf-8", "surrogateescape")
        return text, _bad_byte(text)


def _json_reason(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos}"
    return str(exc)


def _jsonl(lines: _Lines) -> Iterator[Row]:
    number = 0
    for raw in lines:
        number += 1
        text, bad = _decode(raw)
        if not text.strip():
            continue
        try:
            record = loads_json(text)
        except ValueError as exc:
            yield Row(number, None, bad or f"malformed JSON ({_json_reason(exc)})")
            continue
        if not isinstance(record, dict):
            yield Row(number, None, bad or f"expected a JSON object, got {type(record).__name__}")
            continue
        yield Row(number, record, bad)


def _delimited(lines: _Lines, delimiter: str) -> Iterator[Row]:
    decoded = (raw.decode("utf-8", "surrogateescape") for raw in lines)
    reader = csv.reader(decoded, delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        raise DataError(f"malformed header ({exc})") from None
    bad_header = next((p for p in map(_bad_byte, header) if p), None)
    if bad_header:
        raise DataError(f"the header is {bad_header}")
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield Row(start, None, f"malformed {_NAMES[delimiter]} ({exc})")
            continue
        if not cells:
            continue
        record: dict[str, Any] = dict(zip(header, cells, strict=False))
        for name in header[len(cells) :]:
            record[name] = None
        problem = next((p for p in map(_bad_byte, cells) if p), None)
        if problem is None and len(cells) > len(header):
            problem = "more cells than the header has columns"
        yield Row(start, record, problem)


def _unpacked(fh: IO[bytes], name: str | Path) -> AbstractContextManager[IO[bytes]]:
    """``fh`` read through gzip when ``name`` ends in ``.gz`` (leaving ``fh`` open)."""
    if Path(str(name)).name.lower().endswith(".gz"):
        return cast(IO[bytes], gzip.GzipFile(fileobj=fh, mode="rb"))
    return nullcontext(fh)


def _text_rows(fmt: str, lines: _Lines) -> Iterator[Row]:
    if fmt == "jsonl":
        return _jsonl(lines)
    return _delimited(lines, DELIMITERS[fmt])


def _located(path: str | Path, rows: Iterator[Any], lines: _Lines | None = None) -> Iterator[Any]:
    """``rows``, with a file that breaks off while being read refused in one line."""
    try:
        yield from rows
    except DataError as exc:
        raise DataError(f"cannot read {path}: {exc}") from None
    except (OSError, EOFError, zlib.error) as exc:
        after = f" after line {lines.count}" if lines is not None and lines.count else ""
        raise DataError(f"cannot read {path}: broken{after} ({one_line(exc)})") from None


def read_rows(
    path: str | Path, fmt: str | None = None, *, columns: Sequence[str] | None = None
) -> Iterator[Row]:
    """The rows of the file ``path`` (``fmt``: its format, else from its name), bad ones
    with their problem; ``columns``: the Parquet columns wanted (others are not read)."""
    for chunk in read_chunks(path, fmt, 4096, columns=columns):
        for i, (record, number) in enumerate(zip(chunk.rows, chunk.numbers, strict=True)):
            yield Row(number, record, chunk.problems.get(i))


@dataclass
class Chunk:
    """Rows read from one input file: ``rows`` (a dict each; ``None`` for a line that is
    no JSON object), their numbers (:func:`where`), ``problems``: the reason a row is
    bad, by its position in the chunk, and ``digest``: the SHA-256 of the input bytes
    the rows were read from."""

    rows: list[dict[str, Any] | None]
    numbers: list[int]
    problems: dict[int, str]
    digest: str = ""


def read_chunks(
    path: str | Path, fmt: str | None, size: int, *, columns: Sequence[str] | None = None
) -> Iterator[Chunk]:
    """The rows of ``path`` in chunks of ``size`` (see :func:`read_rows`). The file's
    first bytes are checked (:func:`check_file`) before its first row."""
    path = Path(path)
    fmt = format_of(path, fmt)
    try:
        with open(path, "rb") as fh:
            yield from read_chunks_from(fh, fmt, path, size, columns=columns)
    except OSError as exc:  # opening it, or its first bytes (a row's is said by its line)
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_chunks_from(
    fh: IO[bytes],
    fmt: str,
    name: str | Path,
    size: int,
    *,
    columns: Sequence[str] | None = None,
) -> Iterator[Chunk]:
    """The rows of the input open as ``fh`` (seekable, at its start: a file, or a pyarrow
    file system's input file), of format ``fmt``, named ``name`` in messages (a name
    ending in ``.gz`` is read through gzip), in chunks of ``size`` (see
    :func:`read_rows`); its first bytes are checked (:func:`check_stream`) before its
    first row."""
    check_stream(fh, fmt, name)
    if fmt == "parquet":
        yield from _parquet_chunks(fh, name, size, columns)
        return
    with _unpacked(fh, name) as text:
        lines = _Lines(text)
        chunk = Chunk([], [], {})
        for row in _located(name, _text_rows(fmt, lines), lines):
            if row.problem:
                chunk.problems[len(chunk.rows)] = row.problem
            chunk.rows.append(row.record)
            chunk.numbers.append(row.number)
            if len(chunk.rows) >= size:
                chunk.digest = lines.take_digest()
                yield chunk
                chunk = Chunk([], [], {})
        if chunk.rows:
            chunk.digest = lines.take_digest()
            yield chunk


def _parquet_chunks(
    fh: IO[bytes], path: str | Path, size: int, columns: Sequence[str] | None
) -> Iterator[Chunk]:
    pq = require("pyarrow.parquet", "parquet")
    try:
        pf = pq.ParquetFile(fh)
        wanted = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
        batches = pf.iter_batches(batch_size=size, columns=wanted)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DataError(f"cannot read {path}: not a Parquet file ({one_line(exc)})") from None
    done = 0
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:  # a broken page or column chunk
            raise DataError(
                f"cannot read {path}: broken after row {done} ({one_line(exc)})"
            ) from None
        if batch is None:
            return
        digest = hashlib.sha256()
        for column in batch.columns:
            for buffer in column.buffers():
                if buffer is not None:
                    digest.update(memoryview(buffer))
        chunk = Chunk([], [], {}, digest.hexdigest())
        for i, record in enumerate(_parquet_records(batch)):
            if isinstance(record, str):  # a cell that is not valid UTF-8
                chunk.problems[i] = record
                record = None
            chunk.rows.append(record)
            chunk.numbers.append(done + i + 1)
        done += batch.num_rows
        yield chunk


def _parquet_records(batch: Any) -> list[Any]:
    """A record batch's rows as dicts; a row whose text is not valid UTF-8 (Parquet
    written by a tool that did not check) as the reason instead."""
    try:
        return list(batch.to_pylist())
    except UnicodeDecodeError:
        out: list[Any] = []
        for i in range(batch.num_rows):
            try:
                out.extend(batch.slice(i, 1).to_pylist())
            except UnicodeDecodeError as exc:
                out.append(f"not valid UTF-8 ({exc.reason})")
        return out


def read_lines(path: str | Path) -> Iterator[tuple[int, str, str | None]]:
    """``(line number, text, problem)`` for each line of a plain text file (gzipped too),
    its line break taken off; ``problem``: why the line is not valid UTF-8, or None."""
    path = Path(path)
    check_file(path, "text")
    with open(path, "rb") as file, _unpacked(file, path) as fh:
        lines = _Lines(fh)

        def numbered() -> Iterator[tuple[int, str, str | None]]:
            for number, raw in enumerate(lines, 1):
                text, problem = _decode(raw.rstrip(b"\r\n"))
                yield number, text, problem

        yield from _located(path, numbered(), lines)
