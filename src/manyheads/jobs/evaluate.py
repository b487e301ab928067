"""Evaluating a bundle's heads on a labelled file: the job behind ``manyheads eval``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .._settings import Rule, boolean, number
from ..data import LabelSpec, load_dataset
from ..errors import DataError
from ..evaluate.protocols import check_protocol
from .file_settings import FILE_RULES, POSITIVE, FileSettings
from .options import open_bundle

__all__ = ["EvaluateSettings", "evaluate_file"]

# a protocol's own settings, None meaning its default (manyheads.evaluate.protocols)
_PROTOCOL_SETTINGS = ("k", "experiments", "folds", "seed")


@dataclass(frozen=True)
class EvaluateSettings(FileSettings):
    """How :func:`evaluate_file` reads its file and evaluates (its options, described
    there), each checked when the object is made."""

    heads: Sequence[str] | None = None
    tier: int | None = None
    report: str | Path | None = None
    progress: bool = False
    protocol: str = "holdout"
    train: str | Path | None = None
    k: int | None = None
    experiments: int | None = None
    folds: int | None = None
    seed: int | None = None

    _constraints: ClassVar[Mapping[str, Rule]] = {
        **FILE_RULES,
        "tier": Rule(lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
                     "an integer"),
        "progress": boolean(),
        "k": POSITIVE,
        "experiments": POSITIVE,
        "folds": POSITIVE,
        "seed": number(0, integer=True, none=True),
    }  # fmt: skip

    def protocol_settings(self) -> dict[str, Any]:
        """The protocol's settings that are given (``k``, ``experiments``, ``folds``,
        ``seed``)."""
        return {k: v for k in _PROTOCOL_SETTINGS if (v := getattr(self, k)) is not None}


def evaluate_file(
    data: str | Path,
    bundle_path: str | Path,
    *,
    settings: EvaluateSettings | None = None,
    **options: Any,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Metrics of the bundle's heads on a labelled file.

    Returns ``(metrics by head, notes)``; a head whose field the file lacks is
    skipped with a note. Each head reads the field it was trained from.
    ``options`` (by name, over ``settings``): the fields of :class:`EvaluateSettings`:
    ``heads`` (default: all), ``text_field``, ``label_sep``, ``cache_dir``,
    ``no_cache``; ``tier``: a byte bundle's heads at that tier; ``report``: a folder for
    ``report.html`` / ``report.json`` (figures of each head's answers); ``progress``: a
    progress bar while the texts go through the trunk; ``protocol``: ``holdout`` (the
    heads themselves), ``mteb`` (``train``: the file the fresh heads learn from) or
    ``kfold`` (``group_field``: the rows kept in one fold); ``k``, ``experiments``,
    ``folds``, ``seed`` (:mod:`manyheads.evaluate.protocols`), None meaning the
    protocol's default.
    """
    job = EvaluateSettings.merged(settings, options, "evaluate_file")
    protocol_options: dict[str, Any] = job.protocol_settings()
    given = list(protocol_options)
    given += ["train_texts"] * (job.train is not None) + ["groups"] * (job.group_field is not None)
    check_protocol(job.protocol, given, job.report)  # before any file is read
    bundle = open_bundle(
        bundle_path,
        cache_dir=job.cache_dir,
        no_cache=job.no_cache,
        tier=job.tier,
        device=job.device,
    )
    names = bundle.resolve_heads(job.heads)
    specs = [
        LabelSpec(
            name=n, field=str(bundle.head_info[n].get("field", n)), kind=bundle.head_info[n]["kind"]
        )
        for n in names
    ]
    dataset = load_dataset(
        data, text_field=job.text_field, labels=specs, label_sep=job.label_sep,
        group_field=job.group_field, skip_missing_fields=True,
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
    if job.group_field is not None:
        protocol_options["groups"] = dataset.groups
    if job.train is not None:
        train_set = load_dataset(
            job.train, text_field=job.text_field, labels=specs, label_sep=job.label_sep
        )
        protocol_options |= {"train_texts": train_set.texts, "train_labels": train_set.labels}
    metrics = bundle.evaluate(
        dataset.texts, dataset.labels, protocol=job.protocol, report=job.report,
        progress=job.progress, **protocol_options,
    )  # fmt: skip
    return metrics, notes
