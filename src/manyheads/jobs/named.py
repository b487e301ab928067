"""Heads from label names into a bundle folder, their names shown and changed: the jobs
behind ``manyheads heads add``, ``heads show`` and ``heads relabel``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._text import loads_json, one_line
from ..bundle import Bundle, bundle_folder, check_writable, has_bundle
from ..errors import ConfigError, DataError
from .options import open_bundle, other_trunk, refuse_foreign_folder

__all__ = ["NAMED_TRUNK", "add_named_head", "parse_label", "read_labels", "relabel", "show_head"]

NAMED_TRUNK = "minilm"  # the trunk of a new bundle made from names (one that needs no texts)
MAX_LABELS_FILE = 64 * 1024 * 1024


def parse_label(text: str) -> tuple[str, str | None]:
    """``"NAME: DESCRIPTION"`` (the name ends at the first colon followed by a space; no
    such colon: a name alone) as ``(name, description)``."""
    name, sep, description = text.partition(": ")
    return (name.strip(), description.strip() or None) if sep else (text.strip(), None)


def read_labels(path: str | Path) -> dict[str, Any]:
    """A labels file: a JSON object mapping each label to its description (or null), or a
    JSON list of names; one line naming the file otherwise."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_LABELS_FILE:
            raise DataError(f"{p}: a labels file of at most {MAX_LABELS_FILE >> 20} MiB")
        found = loads_json(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{p}: no such labels file") from None
    except IsADirectoryError:
        raise DataError(f"{p}: a labels file, not a folder") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # malformed, or nested too deep (loads_json)
        raise DataError(f"{p}: not JSON ({one_line(exc)})") from None
    if isinstance(found, list):
        for i, n in enumerate(found):
            if not isinstance(n, str):
                raise DataError(f"{p}: label #{i} must be text, got {type(n).__name__}")
        return dict.fromkeys(found)
    if not isinstance(found, dict):
        raise DataError(
            f"{p}: a JSON object mapping each label to its description (or a list of names), "
            f"got {type(found).__name__}"
        )
    return found


def _labels(labels: Sequence[str], labels_file: str | Path | None) -> dict[str, Any]:
    if labels and labels_file is not None:
        raise ConfigError("give labels with --label or with --labels-file, not both")
    if labels_file is not None:
        return read_labels(labels_file)
    out: dict[str, Any] = {}
    for text in labels:
        name, description = parse_label(text)
        if name in out:
            raise DataError(f"label {name!r} is named twice")
        out[name] = description
    return out


def add_named_head(
    bundle_path: str | Path,
    name: str,
    labels: Sequence[str] = (),
    *,
    labels_file: str | Path | None = None,
    kind: str = "multiclass",
    trunk: str | None = None,
    path_sep: str = "::",
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
) -> dict[str, Any]:
    """Add head ``name`` made from label names (``labels``: ``"NAME: DESCRIPTION"``
    texts, or ``labels_file``) to the bundle folder, created (on ``trunk``, default
    ``NAMED_TRUNK``) when it holds no bundle yet; saved. What was added."""
    folder = bundle_folder(bundle_path)
    check_writable(folder)
    named = _labels(labels, labels_file)
    if has_bundle(folder):
        bundle = open_bundle(folder, cache_dir=cache_dir, no_cache=no_cache)
        if trunk is not None and (wanted := other_trunk(bundle, trunk)) is not None:
            raise ConfigError(
                f"bundle {folder} uses trunk {bundle.trunk_name!r}; {{trunk}} {trunk!r} has "
                f"fingerprint {wanted.fingerprint}. Add it to a new bundle to change trunks.",
                options=("trunk",),
            )
    else:
        refuse_foreign_folder(folder)
        from .options import cache_setting

        bundle = Bundle(trunk=trunk or NAMED_TRUNK, cache=cache_setting(cache_dir, no_cache))
    summary = bundle.add_head_from_labels(name, named, kind, path_sep=path_sep)
    bundle.save(folder)
    return {
        "head": summary.name,
        "kind": str(summary.kind),
        "labels": bundle.labels(name),
        "trunk": bundle.trunk_name,
        "seconds": round(summary.seconds, 3),
    }


def show_head(bundle_path: str | Path, name: str) -> dict[str, Any]:
    """Head ``name``: kind, labels (with the descriptions it was made from), how it was
    made and from how many examples, its validation metrics."""
    bundle = open_bundle(bundle_path, no_cache=True)
    if name not in bundle.heads:
        raise DataError(
            f"bundle {bundle_path} has no head {name!r}; its heads: {', '.join(bundle.heads)}"
        )
    info = bundle.head_info[name]
    described = bundle.head_labels(name) or {}
    made = info.get("made") if isinstance(info.get("made"), dict) else {"from": "examples"}
    return {
        "name": name,
        "kind": info["kind"],
        "field": info.get("field", name),
        "made": made,
        "n_train": info.get("n_train"),
        "labels": [{"label": c, "description": described.get(c)} for c in bundle.labels(name)],
        "named": described,
        "metrics": info.get("metrics", {}),
        "generation": info.get("generation", 1),
    }


def relabel(
    bundle_path: str | Path,
    name: str,
    labels: Sequence[str] = (),
    *,
    labels_file: str | Path | None = None,
) -> dict[str, Any]:
    """Change descriptions of head ``name``'s labels and build it again; saved."""
    folder = bundle_folder(bundle_path)
    check_writable(folder)
    bundle = open_bundle(folder)
    bundle.relabel_head(name, _labels(labels, labels_file))
    bundle.save(folder)
    return show_head(folder, name)
