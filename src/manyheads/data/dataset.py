"""Reading labelled texts from CSV / TSV / JSONL / Parquet (and texts from plain files),
strictly: on top of the one reader of tables (:mod:`manyheads.data.tables`), the first
bad row stops the reading.

Every error names the file, the line (JSONL, CSV, TSV, text) or row (Parquet) and
the field, so a bad row in a million-row file can be found.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._text import loads_json, unicode_problem
from ..errors import DataError
from .tables import format_of, input_files, read_lines, read_rows, readable
from .tables import where as row_place

__all__ = [
    "LIST_KINDS",
    "Dataset",
    "LabelSpec",
    "iter_texts",
    "load_dataset",
    "read_records",
    "read_texts",
]

# the kinds whose label is a list per text (heads.kinds.SET_KINDS; data sits below heads)
LIST_KINDS = ("multilabel", "hierarchical")


def _is_table(path: Path) -> bool:
    return path.is_dir() or readable(path.name)


def read_records(
    path: str | Path, columns: Sequence[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(location, record)`` for each row of a CSV / TSV / JSONL / Parquet file (or
    of a folder of them, file after file), strictly: the first bad row stops the
    reading with a :class:`DataError` naming its location.

    ``location`` is ``"FILE line N"`` or ``"FILE row N"`` (Parquet) for error messages
    (:func:`~manyheads.data.tables.where`); ``columns``: the Parquet columns wanted.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"cannot read {path}: no such file or folder")
    if not _is_table(path):
        raise DataError(
            f"{path}: unknown table format; use .csv, .tsv, .jsonl, .ndjson or .parquet "
            "(optionally .gz)"
        )
    for file in input_files(path):
        fmt = format_of(file)
        for row in read_rows(file, fmt, columns=columns):
            place = row_place(file, fmt, row.number)
            if row.problem is not None:
                raise DataError(f"{place}: {row.problem}")
            assert row.record is not None
            yield place, row.record


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
                value = loads_json(text)
            except ValueError as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise DataError(
                    f"{where}: field {fld!r} looks like a JSON list but is malformed ({reason})"
                ) from None
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


def _row_text(where: str, record: dict[str, Any], text_field: str, *, empty: bool = False) -> str:
    """A row's text, checked: present, a string, not blank (unless ``empty``), valid
    Unicode."""
    if text_field not in record:
        raise DataError(
            f"{where}: missing text field {text_field!r} (fields: {', '.join(map(str, record))})"
        )
    text = record[text_field]
    if not isinstance(text, str):
        kind = "null" if text is None else type(text).__name__
        raise DataError(f"{where}: field {text_field!r} is {kind}, expected a string")
    if not text.strip() and not empty:
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


def iter_texts(
    path: str | Path, text_field: str = "text", *, empty: bool = False
) -> Iterator[tuple[str, str]]:
    """``(location, text)`` for each text of a file (or of a folder of tables), read as it
    goes (memory stays flat whatever the file's size): a table's ``text_field``, or a
    plain file with one text per line. Each text is checked as it is read (the location
    names its row or line); ``empty``: an empty text (a blank line) is given as it is,
    for a caller that answers it, instead of refused."""
    path = Path(path)
    if _is_table(path):
        for place, record in read_records(path, columns=[text_field]):
            yield place, _row_text(place, record, text_field, empty=empty)
        return
    if not path.is_file():
        raise DataError(f"cannot read {path}: no such file or folder")
    for number, text, problem in read_lines(path):
        place = f"{path} line {number}"
        if problem is not None:
            raise DataError(f"{place}: {problem}")
        if not empty and not text.strip():
            raise DataError(f"{place}: empty text")
        yield place, text
