"""Atomic file writes: temp file in the same folder, fsync, rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temp file next to ``path``; on success fsync and rename it over ``path``.

    If the block raises, the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


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
