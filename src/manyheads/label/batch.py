"""Labelling one batch of rows given as columns (a pyarrow table): the callable class
Ray Data's ``map_batches`` runs in each actor, plain Python (it needs no Ray)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import require
from .formats import answer_cells, head_fields, json_line
from .rows import Labeller, LabelSettings

__all__ = ["ERROR_COLUMN", "LINE_COLUMN", "LabelBatch"]

ERROR_COLUMN = "__manyheads_error__"  # why a row got no answer; taken out before writing
LINE_COLUMN = "__manyheads_line__"  # JSONL: the whole output line


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
        bundle = Bundle.load(bundle_path, cache=None, tier=s.tier)
        self.labeller = Labeller.of(bundle, tuple(bundle.resolve_heads(s.heads)), s)
        self.output_format = s.output_format or "jsonl"
        self.answer_columns = self.labeller.columns([])

    def __call__(self, batch: Any) -> Any:
        pa = require("pyarrow", "parquet")
        rows = batch.to_pylist()  # a pyarrow table (map_batches' batch_format="pyarrow")
        answers, reasons = self.labeller.label(rows)
        heads = self.labeller.heads
        if self.output_format == "jsonl":
            lines = [json_line(r, a, heads) for r, a in zip(rows, answers, strict=True)]
            return pa.table({LINE_COLUMN: lines, ERROR_COLUMN: pa.array(reasons, pa.string())})
        out = [
            row | answer_cells(answer, self.answer_columns) | {ERROR_COLUMN: reason}
            for row, answer, reason in zip(rows, answers, reasons, strict=True)
        ]
        fields = [*head_fields(self.answer_columns), pa.field(ERROR_COLUMN, pa.string())]
        return pa.Table.from_pylist(out, schema=pa.schema([*batch.schema, *fields]))
