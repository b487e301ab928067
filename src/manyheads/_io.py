"""Atomic file writes: temp file in the same folder, fsync, rename.

Temp names carry the writer's process id (``.NAME.PID-RANDOM.tmp`` for files,
``.NAME.tmp-PID-RANDOM`` for staged folders), so the next writer can tell
the leftovers of a killed process (:func:`remove_stale_temps`) from the
temp files of one still writing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _fresh(parent: Path, prefix: str, suffix: str, make: Any) -> tuple[Path, Any]:
    """``make(path)`` on a new random name in ``parent`` (retried if taken). Unlike
    ``tempfile``'s owner-only files, what ``make`` creates gets the usual modes
    (the umask applies)."""
    import secrets

    for _ in range(100):
        path = parent / f"{prefix}{secrets.token_hex(8)}{suffix}"
        try:
            return path, make(path)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {parent}")


def _keep_mode(source: Path, target: Path) -> None:
    """Give ``source`` the mode of ``target``, the file it will replace, if any."""
    with contextlib.suppress(OSError):
        os.chmod(source, target.stat().st_mode & 0o7777)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temp file next to ``path``; on success fsync and rename it over ``path``.

    If the block raises, the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    tmp, fd = _fresh(
        path.parent, f".{path.name}.{os.getpid()}-", ".tmp", lambda p: os.open(p, flags, 0o666)
    )
    try:
        _keep_mode(tmp, path)
        binary = "b" in mode
        fh: IO[Any]
        with os.fdopen(fd, mode, encoding=None if binary else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def user_cache_folder() -> Path:
    """Where manyheads keeps what it computes once per machine (the embedding cache,
    distilled static tables): ``$MANYHEADS_CACHE_DIR``, else the user cache folder."""
    from platformdirs import user_cache_dir

    return Path(os.environ.get("MANYHEADS_CACHE_DIR") or user_cache_dir("manyheads"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


# Files named by their content (``PREFIX-<12 hex of their SHA-256>SUFFIX``): a new one
# never overwrites one in use, and the same content is written once.
GRAPH_FILE = ("model", ".onnx")  # an ONNX graph
STATIC_FILE = ("static", ".safetensors")  # a static trunk's table and tokenizer
HASHED_FILES = (GRAPH_FILE, STATIC_FILE)


def hashed_name(kind: tuple[str, str], sha256: str) -> str:
    """The name of a file of ``kind`` (one of :data:`HASHED_FILES`) whose SHA-256 is
    ``sha256``."""
    prefix, suffix = kind
    return f"{prefix}-{sha256[:12]}{suffix}"


def write_hashed(folder: Path, blob: bytes, kind: tuple[str, str]) -> tuple[str, str]:
    """Write ``blob`` into ``folder`` under its content's name (:func:`hashed_name`),
    atomically, unless a file of that name is there; returns ``(name, sha256)``."""
    sha = hashlib.sha256(blob).hexdigest()
    name = hashed_name(kind, sha)
    if not (folder / name).is_file():
        atomic_write_bytes(folder / name, blob)
    return name, sha


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename inside ``path`` durable (no-op where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_dir(out: Path, check: Any = None) -> Iterator[Path]:
    """Build a folder beside ``out`` and rename it to ``out`` when the block succeeds.

    ``out`` must be missing or an empty folder when the rename comes
    (``check(out)`` is called just before, to refuse otherwise). If the block
    raises, the half-built folder is removed and ``out`` is untouched.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out.parent, only=out.name)
    work, _ = _fresh(out.parent, f".{out.name}.tmp-{os.getpid()}-", "", lambda p: p.mkdir())
    try:
        yield work
        if check is not None:
            check(out)
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    except BaseException:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        raise


def describe_os_error(exc: OSError) -> str:
    """``exc`` for a one-line message: its reason and the file it concerns."""
    return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")


# .NAME.PID-HEX.tmp (a file), .NAME.tmp-PID-HEX (a staged folder); without PID: older names
_TEMP_FILE = re.compile(r"^\.(?P<name>.+)\.(?:(?P<pid>\d+)-)?[0-9a-f]{16}\.tmp$")
_TEMP_DIR = re.compile(r"^\.(?P<name>.+)\.tmp-(?:(?P<pid>\d+)-)?[0-9a-f]{16}$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # this process's writers clean up after themselves
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_stale_temps(folder: str | os.PathLike[str], *, only: str | None = None) -> list[Path]:
    """Remove the temp files and staged folders in ``folder`` left by processes that
    are gone (killed mid-write); ``only``: those of the target named so. Returns
    what was removed. Temps of live processes are left alone."""
    import shutil

    folder = Path(folder)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_FILE.match(entry.name) or _TEMP_DIR.match(entry.name)
        if match is None or (only is not None and match["name"] != only):
            continue
        pid = match["pid"]
        if pid is not None and _alive(int(pid)):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(path)
    return removed
