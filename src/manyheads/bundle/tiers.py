"""A byte bundle's other tiers: sub-bundles fitted at other nested embedding sizes, kept
in ``tiers/<dim>/`` of its folder and sharing its graph and trunk weights."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import BundleError
from ..trunks.registry import spec_graph
from .builtin import bundle_tiers
from .store import BUNDLE_JSON, HEADS_FILE, TIERS_DIR

__all__ = ["Tiered", "save_tiers", "tier_bundles", "tiers_of"]


def tiers_of(bundle: Any) -> list[int]:
    """The tiers a (saved) byte bundle can be loaded at: its own and those of its
    ``tiers/`` sub-bundles."""
    path: Path | None = bundle.path
    if path is None or not (path / BUNDLE_JSON).is_file():
        return [] if bundle.tier is None else [bundle.tier]
    return bundle_tiers(path)


def tier_bundles(bundle: Any) -> dict[int, Any]:
    """``{tier: bundle}`` of a saved byte bundle's other tiers, loaded with its cache."""
    path: Path | None = bundle.path
    if path is None:
        return {}
    return {
        t: type(bundle).load(path / TIERS_DIR / str(t), cache=bundle.cache_setting)
        for t in tiers_of(bundle)
        if t != bundle.tier
    }


def save_tiers(bundle: Any, tiers: Mapping[int, Any]) -> dict[int, Path]:
    """Save bundles of ``bundle``'s byte trunk at other tiers as its sub-bundles, using
    its graph file and trunk weights rather than copies of them."""
    graph = spec_graph(bundle.state.trunk["spec"])
    path: Path | None = bundle.path
    if path is None or graph is None:
        raise BundleError("save_tiers needs a byte bundle that was saved first")
    own = bundle.tier
    assert own is not None
    out = {}
    for tier, sub in tiers.items():
        trunk = sub.trunk
        if (
            trunk.tier != tier
            or tier == own
            or trunk.with_tier(own).fingerprint != bundle.trunk_fingerprint
        ):
            raise BundleError(
                f"tier {tier}: give a bundle on this bundle's byte trunk at tier {tier}"
            )
        # the same weights: the parent's graph and weights files, named from tiers/<dim>/
        trunk.share_graph(path, *graph)
        sub.share_trunk_weights(f"../../{HEADS_FILE}", (path / HEADS_FILE).resolve())
        out[tier] = sub.save(path / TIERS_DIR / str(tier))
    return out


class Tiered:
    """A bundle's methods for its tiers (a :class:`~manyheads.bundle.Bundle`'s)."""

    _lock: Any
    _saved: Any

    @property
    def tiers(self) -> list[int]:
        """The tiers this saved byte bundle can be loaded at (``Bundle.load(path,
        tier=...)``): its own and those of its ``tiers/`` sub-bundles."""
        return tiers_of(self)

    def tier_bundles(self) -> dict[int, Any]:
        """``{tier: bundle}`` of this saved byte bundle's other tiers (``tiers/<dim>/``),
        loaded with this bundle's cache."""
        return tier_bundles(self)

    def save_tiers(self, tiers: Mapping[int, Any]) -> dict[int, Path]:
        """Save bundles of this byte bundle's trunk at other tiers as its sub-bundles
        (``tiers/<dim>/`` of the folder this bundle was saved to); they use this
        bundle's ONNX graph file and trunk weights (its ``heads.safetensors``)
        rather than copies of them. Save this bundle first."""
        return save_tiers(self, tiers)

    def share_trunk_weights(self, rel: str, file: Path) -> None:
        """Save the trunk's weights as ``rel`` (relative to the folder saved to), the
        file ``file`` another bundle saved, rather than a copy, when they are there."""
        with self._lock:
            self._saved = self._saved.replace(trunk_weights=(rel, file))
