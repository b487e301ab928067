"""File-level operations behind the CLI: train, evaluate, predict, list and remove heads.

Each function takes paths and plain options, calls the library, and returns
data; none prints. The CLI only parses, calls one of these, and prints.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._progress import progress_bar
from .bundle import (
    BUNDLE_JSON,
    HEAD_TYPES,
    Bundle,
    FinetuneSummary,
    HeadSummary,
    bundle_folder,
    check_head_name,
    check_writable,
)
from .cache import EmbeddingCache
from .data import Dataset, LabelSpec, iter_texts, load_dataset
from .errors import BundleError, ConfigError, DataError
from .heads import KINDS
from .heads.fused import check_scores, trim_scores
from .heads.record import HeadLimits
from .store import folder_lock, has_bundle
from .trunks import load_trunk

if TYPE_CHECKING:
    from .trunks.byte import ByteConfig, ByteTrainSummary

__all__ = [
    "DEFAULT_BUNDLE",
    "TaskSpec",
    "TrainReport",
    "evaluate_file",
    "export_file",
    "finetune_file",
    "list_heads",
    "open_bundle",
    "parse_task",
    "predict_rows",
    "predict_texts",
    "remove_head",
    "train_file",
    "train_report",
]


# The defaults of `manyheads train`, chosen from bench/quality.py (see the README):
# MiniLM joined with a TF-IDF-like hashing trunk, C picked on the validation split,
# thresholds that maximise accuracy.
DEFAULT_TRUNK = "minilm+tfidf"
# What `manyheads predict` and `manyheads serve` answer with when no bundle is given.
DEFAULT_BUNDLE = "content"
BYTE_TRUNK_EPOCHS = 4


@dataclass(frozen=True)
class TaskSpec:
    """``NAME[=FIELD][:KIND]`` from the command line."""

    name: str
    field: str
    kind: str

    def label_spec(self) -> LabelSpec:
        return LabelSpec(name=self.name, field=self.field, kind=self.kind)


def parse_task(spec: str) -> TaskSpec:
    """Parse ``NAME``, ``NAME:KIND``, ``NAME=FIELD`` or ``NAME=FIELD:KIND``."""
    text = spec.strip()
    kind = "multiclass"
    if ":" in text:
        text, kind = text.rsplit(":", 1)
        if kind not in KINDS:
            raise ConfigError(
                f"bad --task {spec!r}: unknown kind {kind!r} (use {', '.join(KINDS)})"
            )
    name, _, fld = text.partition("=")
    if not name or ("=" in text and not fld):
        raise ConfigError(f"bad --task {spec!r}: expected NAME[=FIELD][:{'|'.join(KINDS)}]")
    try:
        check_head_name(name)
    except DataError as exc:
        raise ConfigError(f"bad --task {spec!r}: {exc}") from exc
    return TaskSpec(name=name, field=fld or name, kind=kind)


def _task_specs(tasks: Sequence[str | TaskSpec]) -> list[TaskSpec]:
    specs = [t if isinstance(t, TaskSpec) else parse_task(t) for t in tasks]
    if not specs:
        raise ConfigError("give at least one --task NAME[:KIND]")
    return specs


def _read_tasks(
    data: str | Path,
    specs: Sequence[TaskSpec],
    text_field: str,
    group_field: str | None,
    label_sep: str,
) -> Dataset:
    """Read and validate the file holding the texts and every task's labels."""
    return load_dataset(
        data,
        text_field=text_field,
        labels=[s.label_spec() for s in specs],
        group_field=group_field,
        label_sep=label_sep,
    )


def parse_C(value: float | str) -> float | str:
    """A positive number or ``"auto"`` (from the command line, both arrive as text)."""
    if value == "auto":
        return "auto"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--C must be a positive number or 'auto', got {value!r}") from None
    if not number > 0:
        raise ConfigError(f"--C must be a positive number or 'auto', got {value!r}")
    return number


def _cache_arg(cache_dir: str | Path | None, no_cache: bool) -> Any:
    if no_cache:
        return None
    if cache_dir is not None:
        return EmbeddingCache(Path(cache_dir) / "embeddings.sqlite")
    return "default"


def open_bundle(
    path: str | Path,
    *,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    tier: int | None = None,
) -> Bundle:
    return Bundle.load(path, cache=_cache_arg(cache_dir, no_cache), tier=tier)


@dataclass(frozen=True)
class TrainReport:
    """What :func:`train_report` did: the heads at the bundle's tier; for a byte trunk
    trained here, its training summary; for a byte bundle, the heads fitted at its
    other tiers (``BUNDLE/tiers/<dim>/``)."""

    heads: list[HeadSummary]
    trunk: ByteTrainSummary | None = None
    tier: int | None = None
    tiers: dict[int, list[HeadSummary]] = field(default_factory=dict)


def parse_byte_config(value: str | dict[str, Any] | None) -> ByteConfig:
    """A :class:`ByteConfig` from a JSON object of its fields (text or dict), checked."""
    from .trunks.byte import ByteConfig

    if value is None:
        return ByteConfig()
    doc: Any = value
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--byte-config is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f"--byte-config must be a JSON object of byte trunk settings, got {value!r}"
        )
    for key in ("dims", "dilations"):
        items = doc.get(key, [])
        if not isinstance(items, list | tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in items
        ):
            raise ConfigError(f"--byte-config: {key} must be a list of integers, got {items!r}")
    try:
        return ByteConfig.from_settings(doc)
    except ConfigError as exc:
        raise ConfigError(f"--byte-config: {exc}") from None


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
    val_fraction: float = 0.2,
    C: float | str = "auto",
    class_weight: str | None = None,
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
    specs = _task_specs(tasks)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"--task names must be unique, got {names}")
    C = parse_C(C)
    if thresholds not in ("f1", "accuracy"):
        raise ConfigError(f"--thresholds must be f1 or accuracy, got {thresholds!r}")
    if head not in HEAD_TYPES:
        raise ConfigError(f"--head must be one of {', '.join(HEAD_TYPES)}, got {head!r}")
    if class_weight not in (None, "balanced"):
        raise ConfigError(f"--class-weight must be 'balanced', got {class_weight!r}")
    if trunk_epochs is not None and (
        not isinstance(trunk_epochs, int) or isinstance(trunk_epochs, bool) or trunk_epochs < 1
    ):
        raise ConfigError(f"--trunk-epochs must be a positive integer, got {trunk_epochs!r}")
    if tier is not None and (not isinstance(tier, int) or isinstance(tier, bool)):
        raise ConfigError(f"--tier must be an integer, got {tier!r}")
    folder = bundle_folder(bundle_path)  # a built-in bundle by name: refused just below
    check_writable(folder)  # before reading the file: a built-in bundle is read-only
    exists = has_bundle(folder)
    new_byte = trunk == "byte" and not exists
    if not new_byte and (trunk_epochs is not None or byte_config is not None):
        raise ConfigError(
            f"--trunk-epochs and --byte-config shape the byte trunk of a new bundle; {folder} "
            "already has a trained trunk"
            if exists
            else "--trunk-epochs and --byte-config are for --trunk byte"
        )
    config = parse_byte_config(byte_config) if new_byte else None
    if config is not None and tier is not None and tier not in config.dims:
        raise ConfigError(
            f"--tier must be one of the byte trunk's dims {list(config.dims)}, got {tier}"
        )
    if not exists and trunk != "byte" and tier is not None:
        raise ConfigError("--tier is for byte trunks (--trunk byte)")
    limits = HeadLimits() if max_labels is None else HeadLimits(max_labels=max_labels)
    dataset = _read_tasks(data, specs, text_field, group_field, label_sep)
    for spec in specs:  # before any trunk work: 10^5 classes are refused at once
        labels = dataset.labels[spec.name]
        distinct = (
            {v for labs in labels for v in labs} if spec.kind == "multilabel" else set(labels)
        )
        limits.check_labels(list(distinct), f"head {spec.name!r}")
    common: dict[str, Any] = {
        "C": C,
        "class_weight": class_weight,
        "head": head,
        "thresholds": thresholds,
        "seed": seed,
        "progress": progress,
    }
    cache = _cache_arg(cache_dir, no_cache)
    if exists:
        bundle = Bundle.load(folder, cache=cache, limits=limits)
        if trunk == "byte" and bundle.tier is None:
            raise ConfigError(
                f"bundle {folder} uses trunk {bundle.trunk_name!r}, not a byte trunk. "
                "Train into a new bundle to change trunks."
            )
        if trunk not in (None, "byte"):
            wanted = load_trunk(trunk)
            same = wanted.spec() == bundle.trunk_reference["spec"]  # fitted parts: same settings
            if not same and wanted.fingerprint != bundle.trunk_fingerprint:
                raise ConfigError(
                    f"bundle {folder} uses trunk {bundle.trunk_name!r} (fingerprint "
                    f"{bundle.trunk_fingerprint}); --trunk {trunk!r} has fingerprint "
                    f"{wanted.fingerprint}. Train into a new bundle to change trunks."
                )
        if tier is not None and tier != bundle.tier:
            raise ConfigError(
                f"--tier is for byte trunks (--trunk byte); bundle {folder} uses trunk "
                f"{bundle.trunk_name!r}"
                if bundle.tier is None
                else f"--tier {tier}: bundle {folder} answers at tier {bundle.tier}, chosen "
                "when it was created (its other tiers are trained too, in tiers/)"
            )
    elif folder.exists() and (
        not folder.is_dir() or any(not p.name.startswith(".") for p in folder.iterdir())
    ):  # a lock file, or the temp files of a writer creating it now, do not count
        raise BundleError(f"{folder} exists and is not a bundle (no {BUNDLE_JSON})")
    elif config is not None:
        return _train_new_byte(
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
    else:
        bundle = Bundle(trunk=trunk or DEFAULT_TRUNK, cache=cache, limits=limits)
    if bundle.tier is not None:  # a byte bundle: its heads are fitted at every tier
        return _train_byte_heads(dataset, specs, folder, bundle, None, val_fraction, common)
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


def _temporary_cache(stack: contextlib.ExitStack) -> EmbeddingCache:
    """An embedding cache in a temporary folder, removed when ``stack`` closes."""
    import tempfile

    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="manyheads-")))
    cache = EmbeddingCache(folder / "embeddings.sqlite", dtype="float32")
    stack.callback(cache.close)
    return cache


def _pick(values: Sequence[Any], rows: Any) -> list[Any]:
    return [values[i] for i in rows]


def _train_new_byte(
    dataset: Dataset,
    specs: list[TaskSpec],
    folder: Path,
    cache: Any,
    val_fraction: float,
    common: dict[str, Any],
    *,
    config: ByteConfig,
    tier: int | None,
    epochs: int | None,
    on_trunk: Callable[[ByteTrainSummary], None] | None,
) -> TrainReport:
    """A new byte bundle: one train / validation split of the rows; the trunk learns every
    task from the train part; every head is fitted on it at every tier."""
    import numpy as np

    from .data import split_indices
    from .trunks.byte import train_byte_trunk

    texts, n = dataset.texts, len(dataset.texts)
    if val_fraction > 0:
        stratify = next((dataset.labels[s.name] for s in specs if s.kind != "multilabel"), None)
        train_idx, val_idx = split_indices(
            n,
            stratify=None if stratify is None else [str(v) for v in stratify],
            groups=dataset.groups,
            val_fraction=val_fraction,
            seed=common["seed"],
        )
    else:
        train_idx, val_idx = np.arange(n), np.arange(0)
    train_texts = _pick(texts, train_idx)
    byte_trunk, trunk_summary = train_byte_trunk(
        train_texts,
        {s.name: (_pick(dataset.labels[s.name], train_idx), s.kind) for s in specs},
        config=config,
        epochs=epochs or BYTE_TRUNK_EPOCHS,
        seed=common["seed"],
        progress=common["progress"],
    )
    if on_trunk is not None:
        on_trunk(trunk_summary)
    main = tier or config.dims[-1]
    bundle = Bundle(trunk=byte_trunk.with_tier(main), cache=cache)
    split = (train_idx, val_idx) if len(val_idx) else None
    report = _train_byte_heads(dataset, specs, folder, bundle, split, val_fraction, common)
    return TrainReport(heads=report.heads, trunk=trunk_summary, tier=main, tiers=report.tiers)


def _train_byte_heads(
    dataset: Dataset,
    specs: list[TaskSpec],
    folder: Path,
    bundle: Bundle,
    split: tuple[Any, Any] | None,
    val_fraction: float,
    common: dict[str, Any],
) -> TrainReport:
    """Fit every head at a byte bundle's tier and at each of its other tiers, then save
    them: a new bundle (not saved yet) gets a sub-bundle for every other tier of its
    trunk, a saved one's ``tiers/`` sub-bundles are loaded. The sub-bundles share the
    bundle's graph and trunk weights and keep no training data (the bundle keeps
    it). ``split``: the (train, validation) rows every head uses; ``None``: each
    head splits its rows (``val_fraction``). Without a cache, one for this run
    only: the texts go through the trunk once for every tier."""
    from .trunks.byte import ByteTrunk

    with contextlib.ExitStack() as stack:
        if bundle.cache is None:
            temporary = _temporary_cache(stack)
            bundle = (
                Bundle.load(folder, cache=temporary)
                if bundle.path is not None
                else Bundle(trunk=bundle.trunk, cache=temporary)
            )
        trunk = bundle.trunk
        assert isinstance(trunk, ByteTrunk) and bundle.tier is not None
        if bundle.path is not None:
            subs = bundle.tier_bundles()
        else:
            subs = {
                t: Bundle(trunk=trunk.with_tier(t), cache=bundle.cache)
                for t in trunk.config.dims
                if t != bundle.tier
            }
        return _fit_at_tiers(dataset, specs, folder, bundle, subs, split, val_fraction, common)


def _fit_at_tiers(
    dataset: Dataset,
    specs: list[TaskSpec],
    folder: Path,
    bundle: Bundle,
    subs: dict[int, Bundle],
    split: tuple[Any, Any] | None,
    val_fraction: float,
    common: dict[str, Any],
) -> TrainReport:
    assert bundle.tier is not None
    _embed_tiers_once([bundle, *subs.values()], dataset.texts, common["progress"])
    everyone = {bundle.tier: bundle, **subs}
    found: dict[int, list[HeadSummary]] = {t: [] for t in everyone}
    bar = progress_bar(
        total=len(specs) * len(everyone), desc="training heads", enabled=common["progress"]
    )
    for spec in specs:
        labels = dataset.labels[spec.name]
        rows: dict[str, Any]
        if split is None:
            rows = {
                "texts": dataset.texts,
                "labels": labels,
                "groups": dataset.groups,
                "val_fraction": val_fraction,
            }
        else:
            train, val = split
            rows = {
                "texts": _pick(dataset.texts, train),
                "labels": _pick(labels, train),
                "groups": None if dataset.groups is None else _pick(dataset.groups, train),
                "val_texts": _pick(dataset.texts, val),
                "val_labels": _pick(labels, val),
            }
        for t, b in everyone.items():
            bar.set_postfix_str(f"{spec.name} @ {t}")
            summary = b.fit_head(
                spec.name,
                kind=spec.kind,
                field=spec.field,
                keep_data=b is bundle,
                **rows,
                **common,
            )
            found[t].append(summary)
            bar.update()
    bar.close()
    bundle.save(folder)
    if subs:
        bundle.save_tiers(subs)
    heads = found.pop(bundle.tier)
    return TrainReport(heads=heads, tier=bundle.tier, tiers=dict(sorted(found.items())))


def _embed_tiers_once(bundles: list[Bundle], texts: list[str], progress: bool) -> None:
    """Bundles on one byte trunk at several tiers: encode the texts any of them lacks in
    the cache once, at the largest tier, and cache each tier's slice (L2-normalised,
    the vector that tier's trunk gives)."""
    import numpy as np

    from .trunks.base import l2_normalise
    from .trunks.byte import ByteTrunk

    cache = bundles[0].cache
    if cache is None:
        return
    unique = list(dict.fromkeys(texts))
    missing: set[str] = set()
    for b in bundles:
        got = cache.get(b.trunk_fingerprint, unique, b.dim)
        missing.update(t for t, v in zip(unique, got, strict=True) if v is None)
    if not missing:
        return
    todo = [t for t in unique if t in missing]
    trunk = bundles[0].trunk
    assert isinstance(trunk, ByteTrunk)
    full = trunk.with_tier(trunk.config.dims[-1]).encode(todo, progress=progress)
    for b in bundles:
        cache.put(b.trunk_fingerprint, todo, l2_normalise(np.ascontiguousarray(full[:, : b.dim])))


def finetune_file(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str | TaskSpec],
    *,
    text_field: str = "text",
    group_field: str | None = None,
    label_sep: str = ",",
    epochs: int = 2,
    max_length: int = 128,
    batch_size: int = 16,
    lr: float = 2e-5,
    holdout: float = 0.2,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    progress: bool = False,
) -> FinetuneSummary:
    """Fine-tune the bundle's trunk on the tasks of a file, refit every head, save."""
    specs = _task_specs(tasks)
    dataset = _read_tasks(data, specs, text_field, group_field, label_sep)
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
            epochs=epochs,
            max_length=max_length,
            batch_size=batch_size,
            lr=lr,
            holdout=holdout,
            seed=seed,
            progress=progress,
        )
        bundle.save(bundle_path)
    return summary


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
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Metrics of the bundle's heads on a labelled file.

    Returns ``(metrics by head, notes)``; a head whose field the file lacks is
    skipped with a note. Each head reads the field it was trained from.
    ``tier``: a byte bundle's heads at that tier.
    """
    bundle = open_bundle(bundle_path, cache_dir=cache_dir, no_cache=no_cache, tier=tier)
    names = bundle.resolve_heads(heads)
    specs = [
        LabelSpec(name=n, field=str(bundle.head_info[n].get("field", n)), kind=bundle.heads[n].kind)
        for n in names
    ]
    dataset = load_dataset(
        data, text_field=text_field, labels=specs, label_sep=label_sep, skip_missing_fields=True
    )
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
    return bundle.evaluate(dataset.texts, dataset.labels), notes


LONG_TEXTS = ("refuse", "window")


def predict_texts(
    bundle_path: str | Path, texts: Sequence[str] = (), **options: Any
) -> Iterator[dict[str, Any]]:
    """Answers for the given texts, then the texts of a file, in order: the answers of
    :func:`predict_rows` without their texts."""
    for _, answer in predict_rows(bundle_path, texts, **options):
        yield answer


def predict_rows(
    bundle_path: str | Path,
    texts: Sequence[str] = (),
    *,
    input_file: str | Path | None = None,
    text_field: str = "text",
    heads: Sequence[str] | None = None,
    batch_size: int = 256,
    tier: int | None = None,
    max_chars: int = 100_000,
    long_texts: str = "refuse",
    scores: str = "all",
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(text, answer)`` for the given texts, then the texts of a file, in order, read
    and answered a batch at a time (``tier``: a byte bundle's heads at that tier;
    ``scores``: each head's class scores ``all``, the ``top`` five, or ``none``).

    A text longer than ``max_chars`` is refused (``long_texts="refuse"``: a
    :class:`DataError` naming it, after the answers before it) or read in pieces of
    at most ``max_chars`` characters whose probabilities are averaged
    (``"window"``), as the service does.
    """
    if long_texts not in LONG_TEXTS:
        raise ConfigError(f"long_texts must be one of {', '.join(LONG_TEXTS)}, got {long_texts!r}")
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1:
        raise ConfigError(f"max_chars must be a positive integer, got {max_chars!r}")
    if not texts and input_file is None:
        raise ConfigError("nothing to predict: give TEXT arguments or --input FILE")
    check_scores(scores)
    bundle = open_bundle(bundle_path, no_cache=True, tier=tier)
    names = bundle.resolve_heads(heads)
    window = max_chars if long_texts == "window" else None

    def located() -> Iterator[tuple[str, str]]:
        for i, text in enumerate(texts):
            yield f"text #{i + 1}", text
        if input_file is not None:
            yield from iter_texts(input_file, text_field=text_field)

    def answered(batch: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        answers = bundle.predict(batch, heads=names, max_chars=window)
        for text, answer in zip(batch, answers, strict=True):
            yield text, trim_scores(answer, scores)

    batch: list[str] = []
    chars = 0
    for where, text in located():
        if window is None and len(text) > max_chars:
            yield from answered(batch)
            raise DataError(
                f"{where} has {len(text)} characters, over the limit of {max_chars} "
                "(raise the limit, or read long texts in pieces: the window mode)"
            )
        batch.append(text)
        chars += len(text)
        if len(batch) >= batch_size or chars >= 4 * max_chars:
            yield from answered(batch)
            batch, chars = [], 0
    if batch:
        yield from answered(batch)


def list_heads(bundle_path: str | Path) -> list[dict[str, Any]]:
    """One row per head: name, kind, number of labels, field, validation metrics."""
    bundle = open_bundle(bundle_path, no_cache=True)
    rows = []
    for name in bundle.heads:
        info = bundle.head_info[name]
        rows.append(
            {
                "name": name,
                "kind": info["kind"],
                "labels": len(bundle.labels(name)),
                "field": info.get("field", name),
                "n_train": info.get("n_train"),
                "metrics": info.get("metrics", {}),
                "created": info.get("created"),
            }
        )
    return rows


def remove_head(bundle_path: str | Path, name: str) -> None:
    """Remove head ``name`` (of a byte bundle: at every tier)."""
    bundle = open_bundle(bundle_path, no_cache=True)
    subs = bundle.tier_bundles()
    bundle.remove_head(name)
    for sub in subs.values():
        if name in sub.heads:
            sub.remove_head(name)
    assert bundle.path is not None
    bundle.save(bundle.path)
    if subs:
        bundle.save_tiers(subs)


def export_file(bundle_path: str | Path, out: str | Path, *, int8: bool = False) -> Path:
    """Export the bundle at ``bundle_path`` to an ONNX bundle in ``out``."""
    from .export import export_bundle

    return export_bundle(open_bundle(bundle_path, no_cache=True), out, int8=int8)
