"""Training heads from a file into a bundle folder, and fine-tuning a bundle's trunk on
a file's tasks: the jobs behind ``manyheads train`` and ``manyheads finetune``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._progress import progress_bar
from ..bundle import BUNDLE_JSON, Bundle, bundle_folder, check_writable, has_bundle
from ..bundle.store import folder_lock
from ..errors import BundleError, ConfigError
from ..heads.calibration import THRESHOLD_OBJECTIVES
from ..heads.kinds import PATH_SEP, distinct_labels, head_type_problem, kind_of
from ..heads.record import HeadLimits
from ..train.parts import PART_WEIGHTS
from .byte import train_byte_heads, train_new_byte
from .options import (
    DEFAULT_TRUNK,
    TaskSpec,
    TrainReport,
    cache_setting,
    open_bundle,
    other_trunk,
    parse_byte_config,
    parse_C,
    read_tasks,
    refuse_foreign_folder,
    task_specs,
)

if TYPE_CHECKING:
    from typing import Unpack

    from ..train import ByteTrainSummary, FinetuneSummary, HeadSummary
    from ..train.finetune import TuneOptions

__all__ = ["TrainReport", "finetune_file", "train_file", "train_report"]


def train_file(
    data: str | Path, bundle_path: str | Path, tasks: Sequence[str | TaskSpec], **options: Any
) -> list[HeadSummary]:
    """Train the named heads from a file into a bundle folder (created if missing);
    the heads' summaries. Options: those of :func:`train_report`."""
    return train_report(data, bundle_path, tasks, **options).heads


def train_report(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str | TaskSpec],
    *,
    trunk: str | None = None,
    text_field: str = "text",
    group_field: str | None = None,
    label_sep: str = ",",
    label_path_sep: str = PATH_SEP,
    val_fraction: float = 0.2,
    C: float | str = "auto",
    class_weight: str | None = None,
    part_weights: str = "auto",
    head: str = "linear",
    thresholds: str = "accuracy",
    seed: int = 0,
    tier: int | None = None,
    trunk_epochs: int | None = None,
    byte_config: str | dict[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    max_labels: int | None = None,
    progress: bool = False,
    on_trunk: Callable[[ByteTrainSummary], None] | None = None,
) -> TrainReport:
    """Train the named heads from a file into a bundle folder (created if missing).

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
    C = parse_C(C)
    if thresholds not in THRESHOLD_OBJECTIVES:
        choices = ", ".join(THRESHOLD_OBJECTIVES[:-1]) + f" or {THRESHOLD_OBJECTIVES[-1]}"
        raise ConfigError(
            f"{{thresholds}} must be {choices}, got {thresholds!r}", options=("thresholds",)
        )
    problem = head_type_problem(head)
    if problem is not None:
        raise ConfigError(problem.replace("head type", "{head}", 1), options=("head",))
    if part_weights not in PART_WEIGHTS:
        raise ConfigError(
            f"{{part_weights}} must be auto or fixed, got {part_weights!r}",
            options=("part_weights",),
        )
    if class_weight not in (None, "balanced"):
        raise ConfigError(
            f"{{class_weight}} must be 'balanced', got {class_weight!r}", options=("class_weight",)
        )
    if trunk_epochs is not None and (
        not isinstance(trunk_epochs, int) or isinstance(trunk_epochs, bool) or trunk_epochs < 1
    ):
        raise ConfigError(
            f"{{trunk_epochs}} must be a positive integer, got {trunk_epochs!r}",
            options=("trunk_epochs",),
        )
    if tier is not None and (not isinstance(tier, int) or isinstance(tier, bool)):
        raise ConfigError(f"{{tier}} must be an integer, got {tier!r}", options=("tier",))
    folder = bundle_folder(bundle_path)  # a built-in bundle by name: refused just below
    check_writable(folder)  # before reading the file: a built-in bundle is read-only
    exists = has_bundle(folder)
    new_byte = trunk == "byte" and not exists
    if not new_byte and (trunk_epochs is not None or byte_config is not None):
        raise ConfigError(
            f"{{trunk_epochs}} and {{byte_config}} shape the byte trunk of a new bundle; {folder} "
            "already has a trained trunk"
            if exists
            else "{trunk_epochs} and {byte_config} are for {trunk} byte",
            options=("trunk_epochs", "byte_config", "trunk"),
        )
    config = parse_byte_config(byte_config) if new_byte else None
    if config is not None and tier is not None and tier not in config.dims:
        raise ConfigError(
            f"{{tier}} must be one of the byte trunk's dims {list(config.dims)}, got {tier}",
            options=("tier",),
        )
    if not exists and trunk != "byte" and tier is not None:
        raise ConfigError("{tier} is for byte trunks ({trunk} byte)", options=("tier", "trunk"))
    limits = HeadLimits() if max_labels is None else HeadLimits(max_labels=max_labels)
    kinds = [kind_of(spec.kind) for spec in specs]
    try:
        for kind in kinds:
            kind.check_path_sep(label_path_sep)
    except ConfigError as exc:
        raise ConfigError(f"{{label_path_sep}}: {exc}", options=("label_path_sep",)) from None
    dataset = read_tasks(data, specs, text_field, group_field, label_sep)
    for spec in specs:  # before any trunk work: 10^5 classes are refused at once
        labels = dataset.labels[spec.name]
        distinct = distinct_labels(spec.kind, labels)
        limits.check_labels(distinct, f"head {spec.name!r}")
        kind_of(spec.kind).check_paths(  # a path with an empty part, named by its row
            labels, label_path_sep, lambda i: f"{dataset.source}: row {i + 1}: "
        )
    common: dict[str, Any] = {
        "C": C,
        "class_weight": class_weight,
        "part_weights": part_weights,
        "head": head,
        "thresholds": thresholds,
        "seed": seed,
        "progress": progress,
        "path_sep": label_path_sep,
    }
    cache = cache_setting(cache_dir, no_cache)
    if exists:
        bundle = Bundle.load(folder, cache=cache, limits=limits)
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
                val_fraction,
                common,
                config=config,
                tier=tier,
                epochs=trunk_epochs,
                on_trunk=on_trunk,
            )
        bundle = Bundle(trunk=trunk or DEFAULT_TRUNK, cache=cache, limits=limits)
    if bundle.tier is not None:  # a byte bundle: its heads are fitted at every tier
        return train_byte_heads(dataset, specs, folder, bundle, None, val_fraction, common)
    if bundle.trunk_needs_fit:  # a new bundle's fitted trunk parts learn from this file
        bundle.fit_trunk(dataset.texts)
    # one trunk pass for all heads: embed every text once, then fit from the cache
    if bundle.cache is not None:
        bundle.embed(dataset.texts, progress=progress)
    summaries = []
    bar = progress_bar(total=len(specs), desc="training heads", enabled=progress)
    for spec in specs:
        bar.set_postfix_str(spec.name)
        summaries.append(
            bundle.fit_head(
                spec.name,
                dataset.texts,
                dataset.labels[spec.name],
                kind=spec.kind,
                groups=dataset.groups,
                val_fraction=val_fraction,
                field=spec.field,
                **common,
            )
        )
        bar.update()
    bar.close()
    bundle.save(folder)
    return TrainReport(heads=summaries)


def finetune_file(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str | TaskSpec],
    *,
    text_field: str = "text",
    group_field: str | None = None,
    label_sep: str = ",",
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    **options: Unpack[TuneOptions],
) -> FinetuneSummary:
    """Fine-tune the bundle's trunk on the tasks of a file, refit every head, save
    (``options``: how the trunk is tuned, see ``Bundle.finetune``)."""
    specs = task_specs(tasks)
    dataset = read_tasks(data, specs, text_field, group_field, label_sep)
    folder = bundle_folder(bundle_path)
    check_writable(folder)
    if not has_bundle(folder):
        raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
    # the trunk changes: no other writer may save in between (they wait, then find
    # the new trunk and are refused), so hold the lock from load to save
    with folder_lock(folder):
        bundle = open_bundle(bundle_path, cache_dir=cache_dir, no_cache=no_cache)
        summary = bundle.finetune(
            dataset.texts,
            {s.name: (s.kind, dataset.labels[s.name]) for s in specs},
            bundle_path,
            groups=dataset.groups,
            fields={s.name: s.field for s in specs},
            **options,
        )
        bundle.save(bundle_path)
    return summary
