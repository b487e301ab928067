"""Listing and removing a bundle's heads, exporting a bundle: the jobs behind
``manyheads heads list``, ``heads rm`` and ``export``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .options import open_bundle

__all__ = ["export_file", "list_heads", "remove_head"]


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


def export_file(
    bundle_path: str | Path, out: str | Path, *, int8: bool = False, recheck: bool = True
) -> Path:
    """Export the bundle at ``bundle_path`` to an ONNX bundle in ``out``."""
    from ..export import export_bundle

    if not recheck and not int8:
        raise ConfigError("--no-recheck applies to an int8 export (--int8) only")
    return export_bundle(open_bundle(bundle_path, no_cache=True), out, int8=int8, recheck=recheck)
