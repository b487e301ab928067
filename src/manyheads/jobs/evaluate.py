"""Evaluating a bundle's heads on a labelled file: the job behind ``manyheads eval``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..data import LabelSpec, load_dataset
from ..errors import DataError
from ..evaluate.protocols import check_protocol
from .options import open_bundle

__all__ = ["evaluate_file"]


def evaluate_file(
    data: str | Path,
    bundle_path: str | Path,
    *,
    heads: Sequence[str] | None = None,
    text_field: str = "text",
    label_sep: str = ",",
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    tier: int | None = None,
    report: str | Path | None = None,
    progress: bool = False,
    protocol: str = "holdout",
    train: str | Path | None = None,
    group_field: str | None = None,
    **settings: Any,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Metrics of the bundle's heads on a labelled file.

    Returns ``(metrics by head, notes)``; a head whose field the file lacks is
    skipped with a note. Each head reads the field it was trained from.
    ``tier``: a byte bundle's heads at that tier. ``report``: a folder for
    ``report.html`` / ``report.json`` (figures of each head's answers).
    ``progress``: a progress bar while the texts go through the trunk.
    ``protocol``: ``holdout`` (the heads themselves), ``mteb`` (``train``: the file
    the fresh heads learn from) or ``kfold`` (``group_field``: the rows kept in one
    fold); ``settings``: ``k``, ``experiments``, ``folds``, ``seed``
    (:mod:`manyheads.evaluate.protocols`), None meaning the protocol's default.
    """
    given = [k for k, v in settings.items() if v is not None]
    given += ["train_texts"] * (train is not None) + ["groups"] * (group_field is not None)
    check_protocol(protocol, given, report)  # before any file is read
    bundle = open_bundle(bundle_path, cache_dir=cache_dir, no_cache=no_cache, tier=tier)
    names = bundle.resolve_heads(heads)
    specs = [
        LabelSpec(
            name=n, field=str(bundle.head_info[n].get("field", n)), kind=bundle.head_info[n]["kind"]
        )
        for n in names
    ]
    dataset = load_dataset(
        data, text_field=text_field, labels=specs, label_sep=label_sep,
        group_field=group_field, skip_missing_fields=True,
    )  # fmt: skip
    notes = [
        f"skipped head {s.name!r}: {dataset.source} has no field {s.field!r}"
        for s in specs
        if s.name in dataset.missing
    ]
    if not dataset.labels:
        raise DataError(
            f"{dataset.source} has none of the heads' label fields "
            f"({', '.join(s.field for s in specs)})"
        )
    options: dict[str, Any] = {k: v for k, v in settings.items() if v is not None}
    if group_field is not None:
        options["groups"] = dataset.groups
    if train is not None:
        train_set = load_dataset(train, text_field=text_field, labels=specs, label_sep=label_sep)
        options |= {"train_texts": train_set.texts, "train_labels": train_set.labels}
    metrics = bundle.evaluate(
        dataset.texts, dataset.labels, protocol=protocol, report=report, progress=progress,
        **options,
    )  # fmt: skip
    return metrics, notes
