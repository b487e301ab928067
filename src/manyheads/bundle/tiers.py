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

__all__ = ["save_tiers", "tier_bundles", "tiers_of"]


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
