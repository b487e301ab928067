"""A bundle folder on disk: its lock, its document, the paths it may name, its garbage.

Plain data in and out (no :class:`~manyheads.Bundle` here):

- :func:`folder_lock`: the writers' lock of one bundle folder; exclusive between
  processes (``flock`` on ``FOLDER/.lock``) and between threads, re-entrant in
  the thread holding it.
- :func:`read_folder`: the bundle document a folder holds *now* and its weights
  file: ``bundle.json``, unless ``heads.safetensors`` carries a newer generation
  (a save stopped between its two renames, or before the first ``bundle.json``
  of a new bundle), whose copy of ``bundle.json`` is then the document. Every
  path the document names is checked to stay inside the bundle (:func:`check_paths`).
- :func:`collect_garbage`: after a save, the kept data, fine-tuned trunks and
  graphs no saved document names, and temp files of writers that died.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._io import remove_stale_temps
from .._text import loads_json
from ..errors import BundleError, ConfigError
from ..trunks.registry import hashed_file_kinds, spec_files

__all__ = [
    "BUNDLE_JSON",
    "DATA_DIR",
    "HEADS_FILE",
    "HISTORY_DIR",
    "HISTORY_RE",
    "TIERS_DIR",
    "OnDisk",
    "check_paths",
    "clear_first_save",
    "collect_garbage",
    "folder_lock",
    "has_bundle",
    "header_metadata",
    "named_files",
    "own_path",
    "read_document",
    "read_folder",
]

BUNDLE_JSON = "bundle.json"
DATA_DIR = "data"
HEADS_FILE = "heads.safetensors"
TIERS_DIR = "tiers"  # a byte bundle's other tiers: BUNDLE/tiers/<dim>/, each a bundle
LOCK_FILE = ".lock"
DATA_RE = re.compile(r"^data/[0-9a-f]{24}\.jsonl\.gz$")
HISTORY_DIR = "history"  # a head's earlier generations (bundle.history)
HISTORY_RE = re.compile(r"^history/head-[0-9a-f]{12}\.safetensors$")
TRUNK_DIRS = "trunk-*"  # a fine-tuned transformer kept in the bundle
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


# -- the writers' lock ---------------------------------------------------------------


class _Held:
    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self.depth = 0
        self.fh: Any = None
        self.pid = os.getpid()


_LOCKS: dict[str, _Held] = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the writers' lock of ``folder`` (created if missing) for the block."""
    folder = Path(folder)
    key = os.path.realpath(folder)
    with _LOCKS_GUARD:
        held = _LOCKS.get(key)
        if held is None or held.pid != os.getpid():  # a forked child starts afresh
            held = _LOCKS[key] = _Held()
    with held.rlock:
        if held.depth == 0:
            fh = _open_lock(folder / LOCK_FILE)
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            except BaseException:
                fh.close()
                raise
            held.fh = fh
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0:
                fh, held.fh = held.fh, None
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()


def _open_lock(path: Path) -> Any:
    """The lock file, never through a link (which could lead outside the folder)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError:
        if path.is_symlink():
            raise BundleError(
                f"{path} is a link; a bundle folder's lock file is its own (remove the link)"
            ) from None
        raise
    return os.fdopen(fd, "a")


# -- reading --------------------------------------------------------------------------


@dataclass(frozen=True)
class OnDisk:
    """What a bundle folder holds now: its document and the bytes of its weights file."""

    doc: dict[str, Any]
    blob: bytes | None

    @property
    def generation(self) -> str | None:
        gen = self.doc.get("generation")
        return gen if isinstance(gen, str) else None


def header_metadata(header: bytes, where: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file from its first bytes (8-byte length,
    then the JSON header)."""
    try:
        if len(header) < 8:
            raise ValueError("file too short")
        n = int.from_bytes(header[:8], "little")
        if len(header) < 8 + n:
            raise ValueError("header cut short")
        meta = loads_json(header[8 : 8 + n]).get("__metadata__") or {}
        if not isinstance(meta, dict):
            raise ValueError("its metadata is not an object")
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise BundleError(f"cannot read {where}: not a safetensors file ({exc})") from None
    return {str(k): str(v) for k, v in meta.items()}


def _read_header(path: Path) -> bytes:
    """The length and JSON header of the safetensors file ``path`` (not its tensors)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else 0
        return head + fh.read(min(n, 100_000_000))


def _parse_doc(text: str, where: str) -> dict[str, Any]:
    try:
        doc = loads_json(text)
    except ValueError as exc:
        raise BundleError(f"cannot read {where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != "manyheads-bundle":
        raise BundleError(f"{where} is not a manyheads bundle file")
    return doc


def has_bundle(folder: str | os.PathLike[str]) -> bool:
    """True when ``folder`` holds a bundle (``bundle.json``, or a weights file carrying
    one: a new bundle whose save stopped before its ``bundle.json``)."""
    folder = Path(folder)
    if (folder / BUNDLE_JSON).is_file():
        return True
    if not (folder / HEADS_FILE).is_file():
        return False
    try:
        return "bundle_json" in header_metadata(_read_header(folder / HEADS_FILE), folder)
    except (OSError, BundleError):
        return False


def _document(folder: Path, meta: dict[str, str] | None) -> dict[str, Any] | None:
    """The document of ``folder``: ``bundle.json``, unless the weights file's metadata
    ``meta`` carries a newer generation's copy; None if the folder holds neither."""
    meta_file, heads_file = own_path(folder, BUNDLE_JSON), own_path(folder, HEADS_FILE)
    try:
        text: str | None = meta_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read {meta_file}: {exc}") from None
    doc = None if text is None else _parse_doc(text, str(meta_file))
    found = meta or {}
    copy = found.get("bundle_json")
    if copy is not None and (doc is None or found.get("generation") != doc.get("generation")):
        # the weights file is newer and carries the bundle.json it belongs to
        doc = _parse_doc(copy, f"the copy of {BUNDLE_JSON} inside {heads_file}")
    if doc is None and meta is not None:
        raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
    if doc is not None:
        check_paths(doc, folder)
    return doc


def read_document(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The document ``folder`` holds now (as :func:`read_folder`), reading only the
    weights file's header, not its tensors; None if it holds no bundle."""
    folder = Path(folder)
    heads_file = own_path(folder, HEADS_FILE)
    try:
        header: bytes | None = _read_header(heads_file)
    except FileNotFoundError:
        header = None
    except OSError as exc:
        raise BundleError(f"cannot read {heads_file}: {exc.strerror or exc}") from None
    meta = None if header is None else header_metadata(header, heads_file)
    return _document(folder, meta)


def read_folder(folder: str | os.PathLike[str]) -> OnDisk | None:
    """The bundle ``folder`` holds now (see the module docstring), or None if none.

    Refuses (:class:`BundleError`, one line) an unreadable file, a document that
    is not a bundle's, and paths that leave the bundle (:func:`check_paths`).
    """
    folder = Path(folder)
    heads_file = own_path(folder, HEADS_FILE)
    try:
        blob: bytes | None = heads_file.read_bytes()
    except FileNotFoundError:
        blob = None
    except OSError as exc:
        raise BundleError(f"cannot read {heads_file}: {exc.strerror or exc}") from None
    meta = None if blob is None else header_metadata(blob, heads_file)
    doc = _document(folder, meta)
    return None if doc is None else OnDisk(doc=doc, blob=blob)


# -- paths ---------------------------------------------------------------------------


def bundle_root(folder: Path) -> Path:
    """The bundle whose files ``folder`` may use: a tier's sub-bundle
    (``BUNDLE/tiers/<dim>/``) uses its parent's; any other bundle its own folder."""
    parent = folder.parent
    if parent.name == TIERS_DIR and folder.name.isdigit() and has_bundle(parent.parent):
        return parent.parent
    return folder


def inside(folder: Path, rel: Any, what: str, *, root: Path | None = None) -> Path:
    """``folder / rel`` when ``rel`` is a relative path that stays inside ``root``
    (default ``folder``) once resolved; else :class:`BundleError` naming ``what``."""
    root = folder if root is None else root
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\\" in rel:
        raise BundleError(
            f"{folder / BUNDLE_JSON}: {what} must be a relative path inside the bundle, got {rel!r}"
        )
    path = folder / rel
    resolved, top = path.resolve(), root.resolve()
    if resolved != top and top not in resolved.parents:
        hint = (
            "; a tier's bundle uses its parent's files and stays inside its parent bundle's "
            f"{TIERS_DIR}/ folder (copy the parent whole)"
            if rel.startswith("../../") and root == folder
            else ""
        )
        raise BundleError(
            f"{folder / BUNDLE_JSON}: {what} {rel!r} leads outside the bundle folder {root}{hint}"
        )
    return path


def own_path(folder: Path, rel: str) -> Path:
    """``folder / rel``, a path the bundle itself writes, reads or removes (its kept
    ``data/``, a kept data file), when it resolves inside the bundle (a tier's: its
    parent's) once links are followed; else :class:`BundleError`: nothing is written,
    read or removed through a link that leads out."""
    path = folder / rel
    top = bundle_root(folder).resolve()
    resolved = path.resolve()
    if resolved != top and top not in resolved.parents:
        raise BundleError(
            f"{path} leads outside the bundle folder (to {resolved}): a bundle writes, reads "
            f"and removes its own files only; make {rel} a folder or file of its own"
        )
    return path


def _check_sha(folder: Path, value: Any, what: str) -> None:
    if not isinstance(value, str) or not _SHA256_RE.match(value):
        raise BundleError(
            f"{folder / BUNDLE_JSON}: {what} needs its SHA-256 (64 hex digits), got {value!r}"
        )


def _check_trunk_paths(spec: Any, folder: Path, root: Path) -> None:
    """Every file a trunk spec (and its parts) names lies inside the bundle, and those
    the spec must pin have their SHA-256."""
    if not isinstance(spec, dict):
        raise BundleError(f"{folder / BUNDLE_JSON}: a trunk spec must be an object, got {spec!r}")
    try:
        files = spec_files(spec)
    except ConfigError as exc:
        raise BundleError(f"{folder / BUNDLE_JSON}: {exc}") from None
    for file in files:
        inside(folder, file.path, file.what, root=root)
        if file.pinned:
            _check_sha(folder, file.sha256, file.what)


def check_paths(doc: dict[str, Any], folder: Path) -> None:
    """Refuse a document naming a file outside its bundle (a tier's sub-bundle: outside
    its parent bundle), or a graph file without its SHA-256. Kept data must be named
    ``data/HASH.jsonl.gz``."""
    root = bundle_root(folder)
    trunk = doc.get("trunk")
    if isinstance(trunk, dict) and "spec" in trunk:
        _check_trunk_paths(trunk["spec"], folder, root)
    shared = doc.get("trunk_weights")
    if shared is not None:
        path = inside(folder, shared, "'trunk_weights'", root=root)
        if path.name != HEADS_FILE:
            raise BundleError(
                f"{folder / BUNDLE_JSON}: 'trunk_weights' must name a {HEADS_FILE} file, "
                f"got {shared!r}"
            )
    heads = doc.get("heads")
    if isinstance(heads, dict):
        for name, record in heads.items():
            if not isinstance(record, dict):
                continue
            _check_data(folder, name, record.get("data"))
            history = record.get("history")
            if history is None:
                continue
            if not isinstance(history, list):
                raise BundleError(
                    f"{folder / BUNDLE_JSON}: head {name!r}: 'history' must be a list"
                )
            for entry in history:
                if (
                    not isinstance(entry, dict)
                    or not isinstance(entry.get("file"), str)
                    or not HISTORY_RE.match(entry["file"])
                    or isinstance(entry.get("generation"), bool)
                    or not isinstance(entry.get("generation"), int)
                ):
                    raise BundleError(
                        f"{folder / BUNDLE_JSON}: head {name!r}: a 'history' entry must name "
                        f"its generation and its file history/head-SHA.safetensors, got {entry!r}"
                    )
                _check_data(folder, name, entry.get("data"))


def _check_data(folder: Path, name: str, rel: Any) -> None:
    if rel is not None and (not isinstance(rel, str) or not DATA_RE.match(rel)):
        raise BundleError(
            f"{folder / BUNDLE_JSON}: head {name!r} names its kept data {rel!r}; "
            "expected data/HASH.jsonl.gz inside the bundle"
        )


# -- garbage --------------------------------------------------------------------------


def _stays_inside(folder: Path, rel: str) -> bool:
    try:
        own_path(folder, rel)
    except BundleError:
        return False
    return True


def collect_garbage(folder: Path, bundle_json: str) -> None:
    """Remove what no saved document of ``folder`` names any more: kept data files,
    fine-tuned trunk folders (``trunk-ID``), graph files (``model-SHA.onnx``), static
    tables (``static-SHA.safetensors``); and
    the temp files and staged folders of writers that died. Call it holding the
    lock, after the new ``bundle.json`` is in place."""
    doc = json.loads(bundle_json)
    records = [r for r in (doc.get("heads") or {}).values() if isinstance(r, dict)]
    entries = [e for r in records for e in (r.get("history") or []) if isinstance(e, dict)]
    wanted = {str(r["data"]) for r in [*records, *entries] if r.get("data")}
    history = {str(e.get("file")) for e in entries}
    history_dir = folder / HISTORY_DIR
    if history_dir.is_dir() and _stays_inside(folder, HISTORY_DIR):
        for old in history_dir.glob("*.safetensors"):
            if f"{HISTORY_DIR}/{old.name}" not in history:
                old.unlink(missing_ok=True)
        remove_stale_temps(history_dir)
    data_dir = folder / DATA_DIR
    if data_dir.is_dir() and _stays_inside(folder, DATA_DIR):
        for old in data_dir.glob("*.jsonl.gz"):
            if f"{DATA_DIR}/{old.name}" not in wanted:
                old.unlink(missing_ok=True)
        remove_stale_temps(data_dir)
    for old in folder.glob(TRUNK_DIRS):
        if old.is_dir() and f'"{old.name}"' not in bundle_json:
            shutil.rmtree(old, ignore_errors=True)
    for pattern in named_files():
        for old in folder.glob(pattern):
            if old.is_file() and f'"{old.name}"' not in bundle_json:
                old.unlink(missing_ok=True)
    remove_stale_temps(folder)


def named_files() -> tuple[str, ...]:
    """Patterns of the files named by their content that a bundle's trunk may keep (what
    a save's garbage collection looks at)."""
    return tuple(f"{prefix}-*{suffix}" for prefix, suffix in hashed_file_kinds())


def _own_leftover(entry: Path) -> bool:
    """Whether ``entry`` of a folder is something a bundle's save writes (before its
    ``bundle.json``): temp files, the lock, kept data, graph files and tables, a
    fine-tuned trunk; a link is never one."""
    name = entry.name
    if entry.is_symlink():
        return False
    if name == LOCK_FILE or (name.startswith(".") and name.endswith(".tmp")):
        return entry.is_file()
    if entry.is_dir():
        if name == DATA_DIR:
            return all(
                DATA_RE.match(f"{DATA_DIR}/{c.name}") or _own_leftover(c) for c in entry.iterdir()
            )
        return entry.match(TRUNK_DIRS) or (name.startswith(".") and ".tmp-" in name)
    return any(entry.match(p) for p in named_files())


def clear_first_save(folder: Path) -> bool:
    """Empty ``folder`` when all it holds is what a first save of a new bundle left
    when it was stopped (:func:`_own_leftover`, nothing else, no bundle); True when it is
    (then) empty. Holds the folder's lock, so a save in progress is not disturbed."""
    if not folder.is_dir():
        return not folder.exists()
    entries = list(folder.iterdir())
    if not entries or not all(_own_leftover(e) for e in entries):
        return not entries
    with folder_lock(folder):
        if has_bundle(folder):
            return False
        for entry in folder.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return True
