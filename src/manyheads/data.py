"""Reading labelled texts from CSV / TSV / JSONL / Parquet, validating them, splitting them.

Every error names the file, the row (CSV, Parquet) or line (JSONL, text) and
the field, so a bad row in a million-row file can be found.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ._text import unicode_problem
from .errors import ConfigError, DataError, require

__all__ = [
    "Dataset",
    "LabelSpec",
    "check_groups",
    "data_hash",
    "iter_texts",
    "load_dataset",
    "read_records",
    "read_texts",
    "split_indices",
]

# the kinds whose label is a list per text (heads.kinds.SET_KINDS; data sits below heads)
LIST_KINDS = ("multilabel", "hierarchical")

_TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson", ".parquet")


def _format_of(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix in _TABLE_SUFFIXES:
        if name.endswith(suffix):
            return suffix.lstrip(".").replace("ndjson", "jsonl")
    return "text"


def _open_text(path: Path) -> IO[str]:
    try:
        if path.name.lower().endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_records(
    path: str | Path, columns: Sequence[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(location, record)`` for each row of a CSV / TSV / JSONL / Parquet file.

    ``location`` is ``"FILE row N"`` or ``"FILE line N"`` for error messages.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"cannot read {path}: no such file")
    if path.is_dir():
        raise DataError(f"cannot read {path}: it is a folder, not a data file")
    fmt = _format_of(path)
    if fmt == "text":
        raise DataError(
            f"{path}: unknown table format; use .csv, .tsv, .jsonl, .ndjson or .parquet "
            "(optionally .gz)"
        )
    try:
        if fmt == "parquet":
            yield from _read_parquet(path, columns)
        elif fmt == "jsonl":
            yield from _read_jsonl(path)
        else:
            yield from _read_csv(path, delimiter="\t" if fmt == "tsv" else ",")
    except UnicodeDecodeError as exc:
        raise DataError(f"cannot read {path}: not valid UTF-8 ({exc.reason})") from exc
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc


def _read_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path} line {lineno}: malformed JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise DataError(
                    f"{path} line {lineno}: expected a JSON object, got {type(record).__name__}"
                )
            yield f"{path} line {lineno}", record


def _read_csv(path: Path, delimiter: str) -> Iterator[tuple[str, dict[str, Any]]]:
    with _open_text(path) as fh:
        try:
            reader = csv.DictReader(fh, delimiter=delimiter)
            if not reader.fieldnames:
                raise DataError(f"{path}: empty file (no header row)")
            for rowno, row in enumerate(reader, start=1):
                if None in row:
                    raise DataError(f"{path} row {rowno}: more cells than the header has columns")
                yield f"{path} row {rowno}", row
        except csv.Error as exc:
            raise DataError(f"{path}: malformed CSV ({exc})") from exc


def _read_parquet(path: Path, columns: Sequence[str] | None) -> Iterator[tuple[str, dict]]:
    pq = require("pyarrow.parquet", "parquet")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DataError(f"cannot read {path}: not a Parquet file ({exc})") from exc
    names = set(pf.schema_arrow.names)
    wanted = None if columns is None else [c for c in columns if c in names]
    rowno = 0
    for batch in pf.iter_batches(columns=wanted):
        for record in batch.to_pylist():
            rowno += 1
            yield f"{path} row {rowno}", record


@dataclass(frozen=True)
class LabelSpec:
    """A head to read from a file: its name, the field holding its labels, its kind."""

    name: str
    field: str
    kind: str = "multiclass"


@dataclass
class Dataset:
    """Texts with label columns (one per head) and optional groups."""

    texts: list[str]
    labels: dict[str, list[Any]] = field(default_factory=dict)
    groups: list[str] | None = None
    source: str = ""
    missing: list[str] = field(default_factory=list)  # heads whose field the file lacks

    def __len__(self) -> int:
        return len(self.texts)


def _scalar_label(value: Any, where: str, fld: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:  # NaN
            raise DataError(f"{where}: field {fld!r} is empty")
        return str(int(value)) if value.is_integer() else str(value)
    if isinstance(value, str):
        if not value.strip():
            raise DataError(f"{where}: field {fld!r} is empty")
        problem = unicode_problem(value)
        if problem is not None:
            raise DataError(f"{where}: field {fld!r} {problem}")
        return value.strip()
    raise DataError(f"{where}: field {fld!r} must be a single label, got {type(value).__name__}")


def _label_list(value: Any, where: str, fld: str, sep: str) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{where}: field {fld!r} looks like a JSON list but is malformed ({exc.msg})"
                ) from exc
        else:
            return [_scalar_label(p, where, fld) for p in text.split(sep) if p.strip()]
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise DataError(
            f"{where}: field {fld!r} must be a list of labels (JSON list or "
            f"{sep!r}-separated string), got {type(value).__name__}"
        )
    return [_scalar_label(v, where, fld) for v in value]


def _row_text(where: str, record: dict[str, Any], text_field: str) -> str:
    """A row's text, checked: present, a string, not blank, valid Unicode."""
    if text_field not in record:
        raise DataError(
            f"{where}: missing text field {text_field!r} (fields: {', '.join(map(str, record))})"
        )
    text = record[text_field]
    if not isinstance(text, str):
        kind = "null" if text is None else type(text).__name__
        raise DataError(f"{where}: field {text_field!r} is {kind}, expected a string")
    if not text.strip():
        raise DataError(f"{where}: field {text_field!r} is empty")
    problem = unicode_problem(text)
    if problem is not None:
        raise DataError(f"{where}: field {text_field!r} {problem}")
    return text


def load_dataset(
    path: str | Path,
    *,
    text_field: str = "text",
    labels: Sequence[LabelSpec] = (),
    group_field: str | None = None,
    label_sep: str = ",",
    skip_missing_fields: bool = False,
    partial: bool = False,
) -> Dataset:
    """Read and validate a labelled file.

    A label field absent from the whole file is an error, or, with
    ``skip_missing_fields``, a note in ``Dataset.missing`` (used by eval). A
    field missing from one row is an error naming that row, unless ``partial``: then
    a row without a field (or with null) has ``None`` there, and a field no row has
    is missing (rows labelled for some heads only, as ``absorb --eval`` reads them).
    """
    path = Path(path)
    texts: list[str] = []
    columns: dict[str, list[Any]] = {spec.name: [] for spec in labels}
    groups: list[str] | None = [] if group_field else None
    present: dict[str, bool] | None = None
    wanted = [text_field, *(s.field for s in labels)] + ([group_field] if group_field else [])
    for where, record in read_records(path, columns=wanted):
        if present is None:
            present = {s.name: partial or s.field in record for s in labels}
            missing_heads = [s for s in labels if not present[s.name]]
            if missing_heads and not skip_missing_fields:
                s = missing_heads[0]
                raise DataError(
                    f"{where}: no field {s.field!r} for head {s.name!r} "
                    f"(fields: {', '.join(map(str, record))})"
                )
        texts.append(_row_text(where, record, text_field))
        for spec in labels:
            if not present[spec.name]:
                continue
            if partial and record.get(spec.field) is None:
                columns[spec.name].append(None)
                continue
            if spec.field not in record:
                raise DataError(f"{where}: missing field {spec.field!r} for head {spec.name!r}")
            value = record[spec.field]
            if spec.kind in LIST_KINDS:
                columns[spec.name].append(_label_list(value, where, spec.field, label_sep))
            else:
                if value is None:
                    raise DataError(f"{where}: field {spec.field!r} is empty")
                columns[spec.name].append(_scalar_label(value, where, spec.field))
        if groups is not None:
            assert group_field is not None
            group = record.get(group_field)
            if group in (None, ""):
                raise DataError(f"{where}: missing group field {group_field!r}")
            if isinstance(group, str) and unicode_problem(group) is not None:
                raise DataError(f"{where}: field {group_field!r} {unicode_problem(group)}")
            groups.append(str(group))
    if present is None:
        raise DataError(f"{path}: no rows")
    missing = [s.name for s in labels if not present[s.name]]
    if partial:
        missing = [s.name for s in labels if all(v is None for v in columns[s.name])]
    return Dataset(
        texts=texts,
        labels={k: v for k, v in columns.items() if k not in missing},
        groups=groups,
        source=str(path),
        missing=missing,
    )


def read_texts(path: str | Path, text_field: str = "text") -> list[str]:
    """Texts to label: a table's ``text_field``, or a plain file with one text per line."""
    texts = [text for _, text in iter_texts(path, text_field)]
    if not texts:
        raise DataError(f"{path}: no texts")
    return texts


def iter_texts(path: str | Path, text_field: str = "text") -> Iterator[tuple[str, str]]:
    """``(location, text)`` for each text of a file, read as it goes (memory stays flat
    whatever the file's size): a table's ``text_field``, or a plain file with one text
    per line. Each text is checked as it is read (the location names its row or line)."""
    path = Path(path)
    if _format_of(path) != "text":
        for where, record in read_records(path, columns=[text_field]):
            yield where, _row_text(where, record, text_field)
        return
    if not path.is_file():
        raise DataError(f"cannot read {path}: no such file")
    with _open_text(path) as fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                text = line.rstrip("\r\n")
                if not text.strip():
                    raise DataError(f"{path} line {lineno}: empty text")
                yield f"{path} line {lineno}", text
        except UnicodeDecodeError as exc:
            raise DataError(f"cannot read {path}: not valid UTF-8 ({exc.reason})") from exc


def split_indices(
    n: int,
    *,
    stratify: Sequence[Any] | None = None,
    groups: Sequence[Any] | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Train / validation row indices.

    With ``groups``: no group is on both sides (``GroupShuffleSplit``). Else
    stratified by ``stratify`` when every class has at least two rows, else
    a plain shuffle split.
    """
    from sklearn.model_selection import GroupShuffleSplit, ShuffleSplit, StratifiedShuffleSplit

    if not 0 < val_fraction < 1:
        raise ConfigError(f"val_fraction must be between 0 and 1, got {val_fraction!r}")
    if n < 2:
        raise DataError(f"need at least 2 rows to split into train and validation, got {n}")
    X = np.zeros((n, 1))
    if groups is not None:
        if len(set(groups)) < 2:
            raise DataError("all rows share one group; a grouped split needs at least two groups")
        splitter: Any = GroupShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed)
        train, val = next(splitter.split(X, groups=list(groups)))
    else:
        y = None
        if stratify is not None:
            _, counts = np.unique(
                np.asarray(stratify, dtype=object).astype(str), return_counts=True
            )
            n_val = int(np.ceil(val_fraction * n))
            if counts.min() >= 2 and len(counts) <= n_val and len(counts) <= n - n_val:
                y = np.asarray(stratify, dtype=object).astype(str)
        if y is not None:
            splitter = StratifiedShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed)
            train, val = next(splitter.split(X, y))
        else:
            splitter = ShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed)
            train, val = next(splitter.split(X))
    return np.sort(train), np.sort(val)


def data_hash(texts: Sequence[str], labels: Sequence[Any]) -> str:
    """sha256 of training texts and labels (order-sensitive): names a kept training set."""
    import hashlib

    h = hashlib.sha256()
    for text, label in zip(texts, labels, strict=True):
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(json.dumps(label, sort_keys=True, default=str).encode())
        h.update(b"\x01")
    return h.hexdigest()


def check_groups(groups: Sequence[Any], n_texts: int, where: str) -> list[Any]:
    """Groups of ``n_texts`` texts: one each, a string (valid Unicode) or an integer."""
    groups = list(groups)
    if len(groups) != n_texts:
        raise DataError(f"{where}: {n_texts} texts but {len(groups)} groups")
    for i, g in enumerate(groups):
        if isinstance(g, bool) or not isinstance(g, str | int | np.integer):
            raise DataError(
                f"{where}: group #{i} is {str(g)[:40]}; a group is a string or an integer"
            )
        if isinstance(g, str) and unicode_problem(g) is not None:
            raise DataError(f"{where}: group #{i} {unicode_problem(g)}")
    return groups
