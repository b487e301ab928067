"""Labelling one batch of rows given as columns (a pyarrow table): the callable class
Ray Data's ``map_batches`` runs in each actor, and the blocks the Ray engine reads
(:func:`chunk_block`: a chunk of rows read by :mod:`manyheads.data.tables`, with each
row's number and problem), plain Python (they need no Ray)."""

from __future__ import annotations

import os
from typing import Any

from .._text import one_line, unicode_problem
from ..data.tables import Chunk
from ..errors import DataError, require
from .formats import answer_cells, head_fields, json_line, writable
from .rows import Labeller, LabelSettings

__all__ = [
    "ERROR_COLUMN", "LINE_COLUMN", "ROW_COLUMN", "LabelBatch", "chunk_block", "conform",
    "one_schema",
]  # fmt: skip

ERROR_COLUMN = "__manyheads_error__"  # why a row got no answer; taken out before writing
LINE_COLUMN = "__manyheads_line__"  # JSONL: the whole output line
ROW_COLUMN = "__manyheads_row__"  # the row's number in its file; taken out before writing
_OURS = (ROW_COLUMN, ERROR_COLUMN)


def chunk_block(chunk: Chunk, name: str, text_field: str = "text") -> Any:
    """A chunk of rows of the input ``name`` as a pyarrow table: each row's fields, its
    number (:data:`ROW_COLUMN`) and its problem (:data:`ERROR_COLUMN`; None: none yet).
    Arrow holds only valid UTF-8: a row's lone surrogates (its bytes that were not
    UTF-8, or ``\\udXXX`` escapes in its JSON) become U+FFFD, and a row whose text
    (``text_field``) held one is given the reason the labeller gives it."""
    pa = require("pyarrow", "ray")
    try:  # a row of no problem seldom holds a lone surrogate: cleaned only when one does
        records, problems = _cleaned(chunk, text_field, every=False)
        table = _table(records, chunk, name)
    except UnicodeEncodeError:
        records, problems = _cleaned(chunk, text_field, every=True)
        table = _table(records, chunk, name)
    if table.num_columns == 0:  # no row with a field: a table of no columns has no rows
        table = pa.table({ROW_COLUMN: pa.array(chunk.numbers, pa.int64())})
    else:
        table = table.append_column(ROW_COLUMN, pa.array(chunk.numbers, pa.int64()))
    return table.append_column(ERROR_COLUMN, pa.array(problems, pa.string()))


def _cleaned(
    chunk: Chunk, text_field: str, every: bool
) -> tuple[list[dict[str, Any]], list[str | None]]:
    """The rows of ``chunk`` as dicts, those with a problem (``every``: all) with their
    lone surrogates made U+FFFD, and each row's problem (a text that held one: the
    reason the labeller gives it)."""
    records: list[dict[str, Any]] = []
    problems: list[str | None] = []
    for i, row in enumerate(chunk.rows):
        record = row if isinstance(row, dict) else {}
        problem = chunk.problems.get(i)
        clean = writable(record) if every or problem is not None else record
        if problem is None and clean is not record and clean != record:
            text = record.get(text_field)
            problem = unicode_problem(text) if isinstance(text, str) else None
        records.append(clean)
        problems.append(problem)
    return records, problems


def _table(records: list[dict[str, Any]], chunk: Chunk, name: str) -> Any:
    """``records`` as a pyarrow table, a column for every row's fields (in the order
    first seen); rows that no one type per column holds refused in one line."""
    pa = require("pyarrow", "ray")
    names = dict.fromkeys(k for r in records for k in r)
    try:
        return pa.table({k: [r.get(k) for r in records] for k in names})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        rows = f"its rows {chunk.numbers[0]} to {chunk.numbers[-1]}"
        raise _mixed_types(name, rows, exc) from None


def _mixed_types(name: str, rows: str, exc: BaseException) -> DataError:
    """The refusal of an input whose ``rows`` hold values no one Arrow type per column
    holds."""
    return DataError(
        f"cannot label {name} on Ray: {rows} mix types one Arrow column cannot hold "
        f"({one_line(exc)}); label it with the local engine"
    )


def one_schema(schemas: list[Any], last: list[str], name: str) -> Any:
    """The one schema the blocks of ``schemas`` (those of one input file ``name``) fit,
    the columns ``last`` last: a column only some blocks have, or null in some, is kept
    (null in all: text, as the local engine writes it); a column whose types differ is
    promoted (an integer to a float), or, when none holds them all, refused in one
    line."""
    pa = require("pyarrow", "ray")
    try:
        schema = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _mixed_types(name, "its rows", exc) from None
    fields = [f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in schema]
    return pa.schema(
        [f for f in fields if f.name not in last] + [f for f in fields if f.name in last]
    )


def conform(table: Any, schema: Any) -> Any:
    """``table`` with the columns and types of ``schema`` (:func:`one_schema`): the
    columns it lacks are null."""
    pa = require("pyarrow", "ray")
    have = set(table.column_names)
    columns = [
        table.column(f.name).cast(f.type) if f.name in have else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


class LabelBatch:
    """Loads the bundle once (per actor); each call answers a batch of rows and returns
    it with the answers' columns and :data:`ERROR_COLUMN` added: for CSV / Parquet,
    ``HEAD`` and ``HEAD_score`` per head; for JSONL, the whole output line (the row with
    each head's answer as ``predict`` gives it) in :data:`LINE_COLUMN`, since Arrow
    would give every answer's ``scores`` the keys of all of them. ``threads``: the
    trunk's threads in this process (``MANYHEADS_THREADS``; default: every CPU)."""

    def __init__(
        self,
        bundle_path: str | os.PathLike[str],
        settings: LabelSettings | None = None,
        *,
        threads: int | None = None,
        **options: Any,
    ) -> None:
        """``settings`` (a :class:`~manyheads.label.rows.LabelSettings`), with
        ``options`` (its fields, by name) over it: the heads, how rows are judged and
        answered, the bundle's ``tier`` and the ``output_format`` (default JSONL)."""
        from ..bundle import Bundle

        s = LabelSettings.merged(settings, options, "LabelBatch")
        if threads is not None:  # this process's share of the CPUs (a Ray actor's)
            os.environ["MANYHEADS_THREADS"] = str(threads)
        bundle = Bundle.load(bundle_path, cache=None, tier=s.tier, device=s.device)
        self.labeller = Labeller.of(bundle, tuple(bundle.resolve_heads(s.heads)), s)
        self.output_format = s.output_format or "jsonl"
        self.answer_columns = self.labeller.columns([])

    def __call__(self, batch: Any) -> Any:
        """``batch`` answered (a pyarrow table, ``map_batches``' ``batch_format="pyarrow"``):
        a row that came with a problem (:data:`ERROR_COLUMN`, from :func:`chunk_block`)
        is a bad row for it; its number (:data:`ROW_COLUMN`) is passed through."""
        pa = require("pyarrow", "parquet")
        names = batch.column_names
        fields = batch.drop_columns([c for c in _OURS if c in names])
        rows = fields.to_pylist()
        known = batch.column(ERROR_COLUMN).to_pylist() if ERROR_COLUMN in names else []
        problems = {i: p for i, p in enumerate(known) if p is not None}
        answers, reasons = self.labeller.label(rows, problems)
        ours: dict[str, Any] = {ERROR_COLUMN: pa.array(reasons, pa.string())}
        if ROW_COLUMN in names:
            ours[ROW_COLUMN] = batch.column(ROW_COLUMN)
        heads = self.labeller.heads
        if self.output_format == "jsonl":
            lines = [json_line(r, a, heads) for r, a in zip(rows, answers, strict=True)]
            return pa.table({LINE_COLUMN: lines, **ours})
        out = [
            row | answer_cells(answer, self.answer_columns)
            for row, answer in zip(rows, answers, strict=True)
        ]
        schema = pa.schema([*fields.schema, *head_fields(self.answer_columns)])
        table = pa.Table.from_pylist(out, schema=schema)
        for column, values in ours.items():
            table = table.append_column(column, values)
        return table
