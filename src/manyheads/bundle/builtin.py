"""Where a bundle folder is: the built-in bundles shipped inside the package (read-only,
named by a bare string), a byte bundle's tiers (``tiers/<dim>/``), copying a bundle
whole. Reads folders' documents only; builds nothing."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from .._io import describe_os_error, staged_dir
from ..errors import BundleError, ConfigError
from ..trunks.registry import spec_has_tiers, spec_tier, spec_type
from .store import (
    BUNDLE_JSON,
    DATA_DIR,
    TIERS_DIR,
    folder_lock,
    has_bundle,
    own_path,
    read_document,
)

__all__ = [
    "BUILTIN_BUNDLES",
    "builtin_name",
    "builtin_root",
    "bundle_folder",
    "bundle_tiers",
    "check_writable",
    "copy_bundle",
    "folder_trunk_spec",
]

# bundles shipped inside the package (manyheads/models/NAME/), loaded by name
BUILTIN_BUNDLES = ("content", "content-fast")


def builtin_root() -> Path:
    """The folder holding the built-in bundles (``manyheads/models/``)."""
    return Path(__file__).parent.parent / "models"


def bundle_folder(path: str | os.PathLike[str], tier: int | None = None) -> Path:
    """The folder :meth:`Bundle.load` reads for ``path`` and ``tier``.

    A name (a ``str``) in :data:`BUILTIN_BUNDLES` (``"content"``, ``"content-fast"``) is the
    built-in bundle of that name, always; a bundle folder of that name is
    written as a path (``"./content"``, or a :class:`~pathlib.Path`).
    ``tier``: a tier of a byte bundle other than its own is its sub-bundle
    ``tiers/<tier>/``.
    """
    folder = Path(path)
    name = os.fspath(path)
    if isinstance(path, str) and name in BUILTIN_BUNDLES:
        folder = builtin_root() / name
        if not has_bundle(folder):
            raise BundleError(
                f"the built-in bundle {name!r} is not installed ({folder} has no {BUNDLE_JSON}); "
                f"a bundle folder of that name is written as a path: ./{name}"
            )
    if tier is None:
        return folder
    if not isinstance(tier, int) or isinstance(tier, bool):
        raise ConfigError(f"tier must be an integer, got {tier!r}")
    spec = folder_trunk_spec(folder)
    if not spec_has_tiers(spec):
        raise ConfigError(
            f"tier {tier}: only a byte trunk has tiers; the bundle at {folder} has a "
            f"{spec_type(spec)!r} trunk"
        )
    if tier == spec_tier(spec):
        return folder
    sub = folder / TIERS_DIR / str(tier)
    if not has_bundle(sub):
        tiers = ", ".join(str(t) for t in bundle_tiers(folder))
        raise ConfigError(f"the bundle at {folder} has no tier {tier}; its tiers: {tiers}")
    return sub


def builtin_name(folder: str | os.PathLike[str]) -> str | None:
    """The name of the built-in bundle ``folder`` is (or lies inside), else None."""
    root = os.path.realpath(builtin_root())
    where = os.path.realpath(folder)
    if where != root and not where.startswith(root + os.sep):
        return None
    rel = os.path.relpath(where, root).split(os.sep)[0]
    return rel if rel != "." else ""


def check_writable(folder: str | os.PathLike[str]) -> None:
    """Refuse to write into a built-in bundle (it ships inside the package), or into a
    folder whose kept ``data/`` is a link leading outside it (:func:`.store.own_path`)."""
    name = builtin_name(folder)
    if name is not None:
        shown = name or "models"
        raise BundleError(
            f"the built-in bundle {shown!r} is read-only (it ships inside the package, at "
            f"{Path(folder)}); make a copy to change: manyheads copy {shown} DIR, then use -b DIR"
        )
    data = Path(folder) / DATA_DIR
    if data.is_symlink() or data.exists():
        own_path(Path(folder), DATA_DIR)


def copy_bundle(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Copy the bundle ``source`` (a folder, or a built-in bundle's name) whole, with
    its tiers and kept data, to the new or empty folder ``out``: a bundle folder like
    any other, free to change. The copy appears complete or not at all."""
    import shutil

    src = bundle_folder(source)
    out = Path(out)
    check_writable(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"cannot copy to {out}: it exists and is not an empty folder")
    if os.path.realpath(out).startswith(os.path.realpath(src) + os.sep):
        raise BundleError(f"cannot copy {src} into itself ({out})")
    hidden = shutil.ignore_patterns(".*")  # the lock, other writers' temp files
    try:
        # no writer may change a folder while it is copied; a built-in one has none
        lock = folder_lock(src) if builtin_name(src) is None else contextlib.nullcontext()
        with lock, staged_dir(out) as work:
            shutil.copytree(src, work, dirs_exist_ok=True, ignore=hidden)
    except OSError as exc:
        raise BundleError(f"cannot copy {src} to {out}: {describe_os_error(exc)}") from None
    return out


def bundle_tiers(folder: str | os.PathLike[str]) -> list[int]:
    """The tiers a byte bundle folder can be loaded at: its own and those of its
    ``tiers/<dim>/`` sub-bundles (empty for other trunks)."""
    folder = Path(folder)
    spec = folder_trunk_spec(folder)
    if not spec_has_tiers(spec):
        return []
    own = spec_tier(spec)
    tiers = set() if own is None else {own}
    if (folder / TIERS_DIR).is_dir():
        for sub in (folder / TIERS_DIR).iterdir():
            if sub.name.isdigit() and has_bundle(sub):
                tiers.add(int(sub.name))
    return sorted(tiers)


def folder_trunk_spec(folder: Path) -> dict[str, Any]:
    """The trunk spec a bundle folder names (read without loading the bundle)."""
    doc = read_document(folder)  # the weights file's header only, not its tensors
    if doc is None:
        raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
    trunk = doc.get("trunk")
    spec = trunk.get("spec") if isinstance(trunk, dict) else None
    if not isinstance(spec, dict):
        raise BundleError(f"{folder / BUNDLE_JSON}: 'trunk' needs name, fingerprint, dim and spec")
    return spec
