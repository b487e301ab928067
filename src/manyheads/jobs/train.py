"""Training heads from a file into a bundle folder, and fine-tuning a bundle's trunk on
a file's tasks: the jobs behind ``manyheads train`` and ``manyheads finetune``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .._progress import progress_bar
from .._settings import Rule
from ..bundle import BUNDLE_JSON, Bundle, bundle_folder, check_writable, has_bundle
from ..bundle.store import folder_lock
from ..errors import BundleError, ConfigError
from ..heads.head_types import candidate_types, head_type
from ..heads.kinds import distinct_labels, kind_of
from ..heads.record import HeadLimits
from ..train.settings import FitSettings
from .byte import train_byte_heads, train_new_byte
from .file_settings import FILE_RULES, POSITIVE, FileSettings
from .options import (
    TaskSpec,
    TrainReport,
    new_trunk,
    open_bundle,
    other_trunk,
    parse_byte_config,
    parse_C,
    parse_trees,
    refuse_foreign_folder,
    refuse_truncate,
    task_specs,
)

if TYPE_CHECKING:
    from ..train import ByteTrainSummary, FinetuneSummary, HeadSummary
    from ..train.finetune import TuneOptions

__all__ = ["TrainReport", "TrainSettings", "finetune_file", "train_file", "train_report"]


def train_file(
    data: str | Path, bundle_path: str | Path, tasks: Sequence[str | TaskSpec], **options: Any
) -> list[HeadSummary]:
    """Train the named heads from a file into a bundle folder (created if missing);
    the heads' summaries. Options: those of :func:`train_report`."""
    return train_report(data, bundle_path, tasks, **options).heads


# a file's heads are trained choosing C, part weights and thresholds for accuracy
_TRAIN_FIT = FitSettings(C="auto", part_weights="auto", thresholds="accuracy")


@dataclass(frozen=True)
class TrainSettings(FileSettings):
    """How :func:`train_report` trains (its options, described there), checked when
    made: how it reads its file (:class:`~manyheads.jobs.file_settings.FileSettings`),
    its own settings, and ``fit``: how each head is fitted."""

    trunk: str | None = None
    truncate: int | None = None
    tier: int | None = None
    trunk_epochs: int | None = None
    byte_config: str | dict[str, Any] | None = None
    max_labels: int | None = None
    progress: bool = False
    on_trunk: Callable[[ByteTrainSummary], None] | None = None
    fit: FitSettings = field(default_factory=lambda: _TRAIN_FIT)

    _constraints: ClassVar[Mapping[str, Rule]] = {
        **FILE_RULES,
        "trunk_epochs": POSITIVE,
        "truncate": POSITIVE,
        "tier": Rule(lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
                     "an integer"),
    }  # fmt: skip

    @classmethod
    def of_options(cls, options: dict[str, Any]) -> TrainSettings:
        """The settings of :func:`train_report`'s options: those of a head's fitting
        (``val_fraction``, ``C``, ``class_weight``, ``part_weights``, ``head``,
        ``thresholds``, ``seed``, ``beam``, ``precision``, ``trees``, ``label_path_sep``) go to
        ``fit``."""
        options = dict(options)
        fitting = {k: options.pop(k) for k in _FIT_OPTIONS if k in options}
        if "label_path_sep" in options:
            fitting["path_sep"] = options.pop("label_path_sep")
        if "C" in fitting:
            fitting["C"] = parse_C(fitting["C"])
        if "trees" in fitting:
            fitting["trees"] = parse_trees(fitting["trees"])
        fitting["progress"] = options.get("progress", False)
        fit = _TRAIN_FIT.replace(**fitting)
        return cls.of({**options, "fit": fit}, "train_report")


_FIT_OPTIONS = (
    "val_fraction", "C", "class_weight", "part_weights", "head", "thresholds", "seed", "beam",
    "precision", "trees",
)  # fmt: skip


def train_report(
    data: str | Path, bundle_path: str | Path, tasks: Sequence[str | TaskSpec], **options: Any
) -> TrainReport:
    """Train the named heads from a file into a bundle folder (created if missing).

    ``options`` (by name): the fields of :class:`TrainSettings` (``trunk``,
    ``text_field``, ``group_field``, ``label_sep``, ``tier``, ``trunk_epochs``,
    ``byte_config``, ``cache_dir``, ``no_cache``, ``max_labels``, ``progress``,
    ``on_trunk``) and how each head is fitted (``val_fraction``, ``C`` (default
    ``"auto"``), ``class_weight``, ``part_weights`` (``"auto"``), ``head``,
    ``thresholds`` (``"accuracy"``), ``seed``, ``label_path_sep``), every one checked
    before the file is read.

    The whole file is read and validated, and every head trained, before
    anything is written; the bundle is then saved once, atomically.

    ``trunk="byte"`` for a new bundle: the rows are split once into train and
    validation (grouped by ``group_field`` when given); a byte trunk
    (``byte_config``, ``trunk_epochs``) is trained on the train part for all
    tasks jointly, then every head is fitted on the train part and validated on
    the other, at ``tier`` (default: the largest) and, as sub-bundles in
    ``tiers/<dim>/``, at every other tier. ``on_trunk`` is called with the
    trunk's training summary before the heads are fitted. Heads trained later
    into a byte bundle are fitted at its tier and in each of its sub-bundles.
    """
    specs = task_specs(tasks)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{{task}} names must be unique, got {names}", options=("task",))
    job = TrainSettings.of_options(options)
    return _train(data, bundle_path, specs, job)


def _train(
    data: str | Path, bundle_path: str | Path, specs: list[TaskSpec], job: TrainSettings
) -> TrainReport:
    trunk, tier, fit = job.trunk, job.tier, job.fit
    folder = bundle_folder(bundle_path)  # a built-in bundle by name: refused just below
    check_writable(folder)  # before reading the file: a built-in bundle is read-only
    exists = has_bundle(folder)
    new_byte = trunk == "byte" and not exists
    if not new_byte and (job.trunk_epochs is not None or job.byte_config is not None):
        raise ConfigError(
            f"{{trunk_epochs}} and {{byte_config}} shape the byte trunk of a new bundle; {folder} "
            "already has a trained trunk"
            if exists
            else "{trunk_epochs} and {byte_config} are for {trunk} byte",
            options=("trunk_epochs", "byte_config", "trunk"),
        )
    config = parse_byte_config(job.byte_config) if new_byte else None
    if config is not None and tier is not None and tier not in config.dims:
        raise ConfigError(
            f"{{tier}} must be one of the byte trunk's dims {list(config.dims)}, got {tier}",
            options=("tier",),
        )
    if not exists and trunk != "byte" and tier is not None:
        raise ConfigError("{tier} is for byte trunks ({trunk} byte)", options=("tier", "trunk"))
    if exists:
        refuse_truncate(job.truncate, folder)
    elif new_byte and job.truncate is not None:
        raise ConfigError("{truncate} is for transformer trunks, not {trunk} byte",
                          options=("truncate", "trunk"))  # fmt: skip
    trunk_of_new = None if exists or new_byte else new_trunk(trunk, job.truncate)
    limits = HeadLimits() if job.max_labels is None else HeadLimits(max_labels=job.max_labels)
    dataset = job.read_tasks(data, specs)
    for spec in specs:  # before any trunk work: 10^5 classes are refused at once
        labels = dataset.labels[spec.name]
        distinct = distinct_labels(spec.kind, labels)
        extreme = any(head_type(t).extreme for t in candidate_types(fit.head, len(distinct)))
        limits.check_labels(distinct, f"head {spec.name!r}", extreme=extreme)
        kind_of(spec.kind).check_paths(  # a path with an empty part, named by its row
            labels, fit.path_sep, lambda i: f"{dataset.source}: row {i + 1}: "
        )
    cache = job.cache()
    if exists:
        bundle = Bundle.load(folder, cache=cache, limits=limits, device=job.device)
        if trunk == "byte" and bundle.tier is None:
            raise ConfigError(
                f"bundle {folder} uses trunk {bundle.trunk_name!r}, not a byte trunk. "
                "Train into a new bundle to change trunks."
            )
        if trunk not in (None, "byte") and (wanted := other_trunk(bundle, trunk)) is not None:
            raise ConfigError(
                f"bundle {folder} uses trunk {bundle.trunk_name!r} (fingerprint "
                f"{bundle.trunk_fingerprint}); {{trunk}} {trunk!r} has fingerprint "
                f"{wanted.fingerprint}. Train into a new bundle to change trunks.",
                options=("trunk",),
            )
        if tier is not None and tier != bundle.tier:
            raise ConfigError(
                f"{{tier}} is for byte trunks ({{trunk}} byte); bundle {folder} uses trunk "
                f"{bundle.trunk_name!r}"
                if bundle.tier is None
                else f"{{tier}} {tier}: bundle {folder} answers at tier {bundle.tier}, chosen "
                "when it was created (its other tiers are trained too, in tiers/)",
                options=("tier", "trunk"),
            )
    else:
        refuse_foreign_folder(folder)
        if config is not None:
            return train_new_byte(
                dataset,
                specs,
                folder,
                cache,
                fit,
                config=config,
                tier=tier,
                epochs=job.trunk_epochs,
                on_trunk=job.on_trunk,
            )
        assert trunk_of_new is not None  # a new bundle
        bundle = Bundle(trunk=trunk_of_new, cache=cache, limits=limits, device=job.device)
    if bundle.tier is not None:  # a byte bundle: its heads are fitted at every tier
        return train_byte_heads(dataset, specs, folder, bundle, None, fit)
    if bundle.trunk_needs_fit:  # a new bundle's fitted trunk parts learn from this file
        bundle.fit_trunk(dataset.texts)
    # one trunk pass for all heads: embed every text once, then fit from the cache
    if bundle.cache is not None:
        bundle.embed(dataset.texts, progress=job.progress)
    summaries = []
    with progress_bar(total=len(specs), desc="training heads", enabled=job.progress) as bar:
        for spec in specs:
            bar.set_postfix_str(spec.name)
            summaries.append(
                bundle.fit_head(
                    spec.name,
                    dataset.texts,
                    dataset.labels[spec.name],
                    kind=spec.kind,
                    groups=dataset.groups,
                    settings=fit,
                    field=spec.field,
                )
            )
            bar.update()
    bundle.save(folder)
    return TrainReport(heads=summaries)


def finetune_file(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str | TaskSpec],
    **options: Any,
) -> FinetuneSummary:
    """Fine-tune the bundle's trunk on the tasks of a file, refit every head, save.
    ``options``: how the file is read and its vectors cached
    (:class:`~manyheads.jobs.file_settings.FileSettings`), and how the trunk is tuned
    (:class:`~manyheads.train.finetune.TuneOptions`, see ``Bundle.finetune``)."""
    files, tuning = FileSettings.split(options, "finetune_file")
    specs = task_specs(tasks)
    dataset = files.read_tasks(data, specs)
    folder = bundle_folder(bundle_path)
    check_writable(folder)
    if not has_bundle(folder):
        raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
    # the trunk changes: no other writer may save in between (they wait, then find
    # the new trunk and are refused), so hold the lock from load to save
    with folder_lock(folder):
        bundle = open_bundle(
            bundle_path, cache_dir=files.cache_dir, no_cache=files.no_cache, device=files.device
        )
        summary = bundle.finetune(
            dataset.texts,
            {s.name: (s.kind, dataset.labels[s.name]) for s in specs},
            bundle_path,
            groups=dataset.groups,
            fields={s.name: s.field for s in specs},
            **cast("TuneOptions", tuning),
        )
        bundle.save(bundle_path)
    return summary
