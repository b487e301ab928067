"""Fine-tuning a bundle's transformer trunk (``Bundle.finetune``): LP-FT on some of
the tasks' rows (:mod:`manyheads.train.lpft`), then every head refitted on the new
trunk from its training data, calibrated on rows the new trunk did not see."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

import numpy as np

from ..errors import ConfigError, DataError
from ..heads import check_head_name, check_kind
from ..heads.linear import LinearHead
from ..trunks import TransformerTrunk
from ..trunks.base import TrunkBase, check_texts
from ..trunks.registry import replace_part_spec
from .fit import FitOptions, FitTarget, HeadSummary, split
from .lpft import FinetuneReport, Finetuning, finetune_transformer, training_embeddings

if TYPE_CHECKING:
    from pathlib import Path as _Path
    from typing import Unpack

__all__ = [
    "FinetuneOptions",
    "FinetuneReport",
    "FinetuneSummary",
    "TuneOptions",
    "finetune_bundle",
    "finetune_transformer",
    "training_embeddings",
    "tune_trunk",
    "tuned_transformer",
]


class TuneOptions(TypedDict, total=False):
    """How the trunk is fine-tuned (:func:`finetune_bundle`'s options but the data's)."""

    epochs: int
    max_length: int
    batch_size: int
    lr: float
    holdout: float
    seed: int
    progress: bool


class FinetuneOptions(TuneOptions, total=False):
    """The options of :func:`finetune_bundle` (and ``Bundle.finetune``), by name."""

    groups: Sequence[Any] | None
    fields: Mapping[str, str] | None


class TunableBundle(FitTarget, Protocol):
    """What fine-tuning needs of the bundle whose trunk it tunes (a ``Bundle``)."""

    path: _Path | None

    @property
    def trunk(self) -> TrunkBase: ...

    @property
    def trunk_name(self) -> str: ...

    @property
    def head_info(self) -> Mapping[str, dict[str, Any]]: ...

    def training_data(self, name: str) -> tuple[list[str], list[Any], Any] | None: ...

    def replace_trunk(self, trunk: TrunkBase, spec: dict[str, Any]) -> None: ...

    def fit_head(
        self,
        name: str,
        texts: Sequence[str],
        labels: Sequence[Any],
        kind: str = "multiclass",
        **options: Unpack[FitOptions],
    ) -> HeadSummary: ...


@dataclass(frozen=True)
class FinetuneSummary:
    """What :meth:`Bundle.finetune` reports: the fine-tuning run, each refitted head,
    and the heads dropped because the bundle had no training data for them."""

    report: FinetuneReport
    heads: list[HeadSummary]
    dropped: list[str]


def finetune_bundle(
    bundle: TunableBundle,
    texts: Sequence[str],
    tasks: Mapping[str, tuple[str, Sequence[Any]]],
    folder: str | os.PathLike[str],
    *,
    groups: Sequence[Any] | None = None,
    fields: Mapping[str, str] | None = None,
    holdout: float = 0.2,
    **options: Any,
) -> FinetuneSummary:
    """Fine-tune ``bundle``'s trunk on ``tasks`` (LP-FT) and refit every head on the new
    trunk.

    ``tasks``: head name -> (kind, labels aligned with ``texts``). The
    fine-tuned transformer is written inside the bundle ``folder``
    (``trunk-ID/``, safetensors) and the bundle points to it with a new
    fingerprint. Every head is then refitted on the new embeddings, with
    its own training data: the data given here for the heads in
    ``tasks``, the data the bundle kept for the others. A head whose data
    is missing is removed and reported in ``dropped``, never kept on a
    trunk it was not trained on. Save the bundle afterwards (the CLI does).

    Temperatures and thresholds are fitted again, on texts the new trunk
    did not see: a ``holdout`` share of ``texts`` (grouped by ``groups``)
    is left out of fine-tuning, and each head is fitted on its rows the
    trunk saw and calibrated on the others (no refit on all rows: the
    trunk's embeddings of its own training texts are more separable than
    those of new texts, so a temperature fitted on them is too low). A head
    whose rows were all seen by the trunk is calibrated on a split of them
    and says so (``metrics["calibrated_on_trunk_training_rows"]``).

    ``options``: how the transformer is tuned, the fields of
    :class:`~manyheads.train.lpft.Finetuning` by name (``epochs``, ``max_length``,
    ``batch_size``, ``lr``, ``seed``, ``progress``, ...).
    """
    tuning = Finetuning.of(options, "finetune")
    seed, progress = tuning.seed, tuning.progress
    folder = Path(folder)
    tuned_transformer(bundle)  # refuses a trunk without one transformer part first
    texts = check_texts(texts)
    for name, (kind, labels) in tasks.items():
        check_head_name(name)
        check_kind(kind)
        if len(labels) != len(texts):
            raise DataError(f"task {name!r}: {len(texts)} texts but {len(labels)} labels")
    if not 0 <= holdout < 1:
        raise ConfigError(f"holdout must be in [0, 1); got {holdout}")
    if holdout > 0:
        first_kind, first_labels = next(iter(tasks.values()))
        tune_idx, _ = split(first_kind, list(first_labels), groups, holdout, seed)
    else:
        tune_idx = np.arange(len(texts))
    tune_texts = [texts[i] for i in tune_idx]
    tune_tasks = {
        name: (kind, [list(labels)[i] for i in tune_idx]) for name, (kind, labels) in tasks.items()
    }
    report, new_trunk, new_spec = tune_trunk(bundle, tune_texts, tune_tasks, folder, **options)
    # the data of every head, before the heads change
    refits: dict[str, tuple[list[str], list[Any], Any, str]] = {}
    dropped: list[str] = []
    for name in bundle.heads:
        if name in tasks:
            continue
        kept = bundle.training_data(name)
        if kept is None:
            dropped.append(name)
            continue
        info = bundle.head_info[name]
        refits[name] = (kept[0], kept[1], kept[2], str(info.get("field", name)))
    for name, (_, labels) in tasks.items():
        refits[name] = (texts, list(labels), groups, (fields or {}).get(name, name))
    old_info = dict(bundle.head_info)
    old_C = {n: h.C if isinstance(h, LinearHead) else 1.0 for n, h in bundle.heads.items()}
    old_thr = {n: h.thresholds for n, h in bundle.heads.items()}
    kinds = {n: old_info[n]["kind"] for n in old_info}
    kinds.update({n: k for n, (k, _) in tasks.items()})
    bundle.replace_trunk(new_trunk, new_spec)
    seen = set(tune_texts)
    summaries = []
    for name, (t, labels, g, field_name) in refits.items():
        info = old_info.get(name, {})
        common: dict[str, Any] = {
            "kind": kinds[name],
            "field": field_name,
            "head": str(info.get("head_type", "linear")),
            "C": old_C.get(name, 1.0),
            "thresholds": old_thr.get(name, "f1"),
            "progress": progress,
            "seed": seed,
        }
        used = [i for i, text in enumerate(t) if text in seen]
        fresh = [i for i, text in enumerate(t) if text not in seen]
        if used and fresh:  # fit on rows the trunk saw, calibrate on the others
            summary = bundle.fit_head(
                name,
                [t[i] for i in used],
                [labels[i] for i in used],
                val_texts=[t[i] for i in fresh],
                val_labels=[labels[i] for i in fresh],
                refit=False,
                **common,
            )
        else:  # the trunk saw none of these texts, or all of them
            summary = bundle.fit_head(name, t, labels, groups=g, **common)
            if not fresh:
                summary.metrics["calibrated_on_trunk_training_rows"] = True  # = head_info's
        summaries.append(summary)
    bundle.path = folder
    return FinetuneSummary(report=report, heads=summaries, dropped=dropped)


def tuned_transformer(bundle: TunableBundle) -> tuple[int, TransformerTrunk]:
    """The index and the trunk of ``bundle``'s one transformer part (what fine-tuning
    changes); anything else is refused in one line."""
    parts: list[TrunkBase] = bundle.trunk.parts
    neural = [i for i, p in enumerate(parts) if p.tunable]
    if len(neural) != 1:
        raise ConfigError(
            "an exported (ONNX) bundle cannot be fine-tuned: fine-tune the bundle it was "
            "exported from and export it again"
            if any(p.exported for p in parts)
            else f"fine-tuning needs a trunk with exactly one transformer part; this "
            f"bundle's trunk is {bundle.trunk_name!r}"
        )
    return neural[0], cast(TransformerTrunk, parts[neural[0]])  # the one tunable type


def tune_trunk(
    bundle: TunableBundle,
    texts: Sequence[str],
    tasks: Mapping[str, tuple[str, Sequence[Any]]],
    folder: str | os.PathLike[str],
    **options: Any,
) -> tuple[FinetuneReport, TrunkBase, dict[str, Any]]:
    """Fine-tune ``bundle``'s transformer part on ``texts`` (LP-FT,
    :func:`~manyheads.train.lpft.finetune_transformer` with ``options``) into
    ``folder/trunk-ID/``; the report, the new trunk (the composite with its transformer
    part replaced) and its spec (the folder relative, so the bundle folder can move).
    The bundle itself is not changed."""
    index, source = tuned_transformer(bundle)
    trunk = bundle.trunk
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rel = f"trunk-{uuid.uuid4().hex[:12]}"
    # fine-tuned where the trunk runs (a GPU: the bundle's device)
    options = {"device": source.device.torch_name, **options}
    report = finetune_transformer(source.path, texts, tasks, folder / rel, **options)
    tuned = TransformerTrunk(
        folder / rel, name=f"{source.name}-ft", pooling=source.pooling, max_length=source.max_length
    )
    spec = tuned.spec()
    spec["path"] = rel  # relative: the bundle folder can move
    new_parts = list(trunk.parts)
    new_parts[index] = tuned
    new_trunk = trunk.with_parts(new_parts)
    return report, new_trunk, replace_part_spec(new_trunk.spec(), index, spec)
