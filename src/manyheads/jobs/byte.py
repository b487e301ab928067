"""A byte bundle's heads at every tier: a new byte bundle (its trunk trained on the
file's tasks, then every head fitted at each tier), or heads added to one (fitted at
its tier and in each of its ``tiers/<dim>/`` sub-bundles)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._progress import progress_bar
from ..bundle import Bundle
from ..cache import EmbeddingCache
from ..data import Dataset, split_indices
from ..heads.kinds import kind_of
from ..trunks.base import l2_normalise
from .options import BYTE_TRUNK_EPOCHS, TaskSpec, TrainReport

if TYPE_CHECKING:
    from ..train import ByteTrainSummary, HeadSummary
    from ..train.settings import FitSettings
    from ..trunks.byte import ByteConfig

__all__ = ["train_byte_heads", "train_new_byte"]


def _temporary_cache(stack: contextlib.ExitStack) -> EmbeddingCache:
    """An embedding cache in a temporary folder, removed when ``stack`` closes."""
    import tempfile

    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="manyheads-")))
    cache = EmbeddingCache(folder / "embeddings.sqlite", dtype="float32")
    stack.callback(cache.close)
    return cache


def _pick(values: Sequence[Any], rows: Any) -> list[Any]:
    return [values[i] for i in rows]


def train_new_byte(
    dataset: Dataset,
    specs: list[TaskSpec],
    folder: Path,
    cache: Any,
    fit: FitSettings,
    *,
    config: ByteConfig,
    tier: int | None,
    epochs: int | None,
    on_trunk: Callable[[ByteTrainSummary], None] | None,
) -> TrainReport:
    """A new byte bundle: one train / validation split of the rows; the trunk learns every
    task from the train part; every head is fitted on it at every tier."""
    from ..train.byte import train_byte_trunk

    texts, n = dataset.texts, len(dataset.texts)
    if fit.val_fraction > 0:
        stratify = next((dataset.labels[s.name] for s in specs if not kind_of(s.kind).is_set), None)
        train_idx, val_idx = split_indices(
            n,
            stratify=None if stratify is None else [str(v) for v in stratify],
            groups=dataset.groups,
            val_fraction=fit.val_fraction,
            seed=fit.seed,
        )
    else:
        train_idx, val_idx = np.arange(n), np.arange(0)
    train_texts = _pick(texts, train_idx)
    byte_trunk, trunk_summary = train_byte_trunk(
        train_texts,
        {s.name: (_pick(dataset.labels[s.name], train_idx), s.kind) for s in specs},
        config=config,
        epochs=epochs or BYTE_TRUNK_EPOCHS,
        seed=fit.seed,
        progress=fit.progress,
    )
    if on_trunk is not None:
        on_trunk(trunk_summary)
    main = tier or config.dims[-1]
    bundle = Bundle(trunk=byte_trunk.with_tier(main), cache=cache)
    split = (train_idx, val_idx) if len(val_idx) else None
    report = train_byte_heads(dataset, specs, folder, bundle, split, fit)
    return TrainReport(heads=report.heads, trunk=trunk_summary, tier=main, tiers=report.tiers)


def train_byte_heads(
    dataset: Dataset,
    specs: list[TaskSpec],
    folder: Path,
    bundle: Bundle,
    split: tuple[Any, Any] | None,
    fit: FitSettings,
) -> TrainReport:
    """Fit every head at a byte bundle's tier and at each of its other tiers, then save
    them: a new bundle (not saved yet) gets a sub-bundle for every other tier of its
    trunk, a saved one's ``tiers/`` sub-bundles are loaded. The sub-bundles share the
    bundle's graph and trunk weights and keep no training data (the bundle keeps
    it). ``split``: the (train, validation) rows every head uses; ``None``: each
    head splits its rows (``val_fraction``). Without a cache, one for this run
    only: the texts go through the trunk once for every tier."""
    with contextlib.ExitStack() as stack:
        if bundle.cache is None:
            temporary = _temporary_cache(stack)
            bundle = (
                Bundle.load(folder, cache=temporary)
                if bundle.path is not None
                else Bundle(trunk=bundle.trunk, cache=temporary)
            )
        trunk = bundle.trunk
        assert bundle.tier is not None
        if bundle.path is not None:
            subs = bundle.tier_bundles()
        else:
            subs = {
                t: Bundle(trunk=trunk.with_tier(t), cache=bundle.cache)
                for t in trunk.tiers
                if t != bundle.tier
            }
        return _fit_at_tiers(dataset, specs, folder, bundle, subs, split, fit)


def _fit_at_tiers(
    dataset: Dataset,
    specs: list[TaskSpec],
    folder: Path,
    bundle: Bundle,
    subs: dict[int, Bundle],
    split: tuple[Any, Any] | None,
    fit: FitSettings,
) -> TrainReport:
    assert bundle.tier is not None
    _embed_tiers_once([bundle, *subs.values()], dataset.texts, fit.progress)
    everyone = {bundle.tier: bundle, **subs}
    found: dict[int, list[HeadSummary]] = {t: [] for t in everyone}
    with progress_bar(
        total=len(specs) * len(everyone), desc="training heads", enabled=fit.progress
    ) as bar:
        for spec in specs:
            labels = dataset.labels[spec.name]
            rows: dict[str, Any]
            if split is None:
                rows = {
                    "texts": dataset.texts,
                    "labels": labels,
                    "groups": dataset.groups,
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
                    settings=fit,
                    **rows,
                )
                found[t].append(summary)
                bar.update()
    bundle.save(folder)
    if subs:
        bundle.save_tiers(subs)
    heads = found.pop(bundle.tier)
    return TrainReport(heads=heads, tier=bundle.tier, tiers=dict(sorted(found.items())))


def _embed_tiers_once(bundles: list[Bundle], texts: list[str], progress: bool) -> None:
    """Bundles on one byte trunk at several tiers: encode the texts any of them lacks in
    the cache once, at the largest tier, and cache each tier's slice (L2-normalised,
    the vector that tier's trunk gives)."""
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
    full = trunk.with_tier(trunk.tiers[-1]).encode(todo, progress=progress)
    for b in bundles:
        cache.put(b.trunk_fingerprint, todo, l2_normalise(np.ascontiguousarray(full[:, : b.dim])))
