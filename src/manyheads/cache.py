"""A persistent, content-addressed embedding cache.

Vectors are keyed by ``(trunk fingerprint, sha256(text))`` in an SQLite file,
so a head trained on texts the trunk has already seen costs no trunk call.
Several processes may read and write the same file at once (WAL mode, busy
timeout, ``INSERT OR IGNORE``).

Location: the ``path`` given, else ``$MANYHEADS_CACHE_DIR/embeddings.sqlite``,
else the user cache folder (``$XDG_CACHE_HOME/manyheads`` on Linux).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ._io import user_cache_folder
from .errors import ConfigError, ManyheadsError

__all__ = ["EmbeddingCache", "default_cache_path", "text_key"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    fingerprint TEXT NOT NULL,
    key BLOB NOT NULL,
    vec BLOB NOT NULL,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
"""
_CHUNK = 500  # keys per SELECT (well under SQLite's variable limit)
_DTYPES = {"float16": np.float16, "float32": np.float32}


def default_cache_path() -> Path:
    return user_cache_folder() / "embeddings.sqlite"


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class EmbeddingCache:
    """SQLite-backed map ``(fingerprint, text) -> vector``.

    ``dtype`` is the storage type (``"float16"`` halves the file; vectors come
    back as float32 either way).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, dtype: str = "float16") -> None:
        if dtype not in _DTYPES:
            raise ConfigError(f"cache dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        self.path = Path(path) if path is not None else default_cache_path()
        self.dtype = dtype
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=60.0, check_same_thread=False, isolation_level=None
            )
            self._setup()
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None
        except (OSError, sqlite3.Error) as exc:
            raise ManyheadsError(f"cannot open the embedding cache {self.path}: {exc}") from exc
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _damaged(self, exc: Exception) -> ManyheadsError:
        return ManyheadsError(
            f"the embedding cache {self.path} is damaged ({exc}); delete it (it holds only "
            "vectors, computed again when needed) or disable the cache"
        )

    @contextlib.contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        """A damaged file or a failing disk as one line naming the file."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc) or "disk" in str(exc):
                raise ManyheadsError(
                    f"cannot {action} the embedding cache {self.path}: {exc}"
                ) from None
            raise self._damaged(exc) from None
        except sqlite3.DatabaseError as exc:  # "database disk image is malformed", ...
            raise self._damaged(exc) from None

    def _setup(self) -> None:
        """WAL mode and the table. Switching journal mode can report "database is
        locked" at once (without waiting) while another process opens the same new
        file, so it is retried for a while."""
        deadline = time.monotonic() + 60.0
        delay = 0.01
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute(_SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def get(self, fingerprint: str, texts: Sequence[str], dim: int) -> list[np.ndarray | None]:
        """Cached vectors for ``texts`` (``None`` where missing)."""
        keys = [text_key(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock, self._guard("read"):
            for start in range(0, len(keys), _CHUNK):
                chunk = list(dict.fromkeys(keys[start : start + _CHUNK]))
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, vec FROM embeddings WHERE fingerprint=? AND key IN ({marks})",
                    [fingerprint, *chunk],
                ).fetchall()
                for key, blob in rows:
                    vec = _decode(blob, dim)
                    if vec is not None:
                        found[key] = vec
        out = [found.get(k) for k in keys]
        hit = sum(v is not None for v in out)
        self.hits += hit
        self.misses += len(out) - hit
        return out

    def put(self, fingerprint: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors (one row per text); existing entries are left as they are."""
        if len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
        data = np.asarray(vectors).astype(_DTYPES[self.dtype])
        rows = [(fingerprint, text_key(t), data[i].tobytes()) for i, t in enumerate(texts)]
        with self._lock, self._guard("write"):
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany(
                    "INSERT OR IGNORE INTO embeddings (fingerprint, key, vec) VALUES (?, ?, ?)",
                    rows,
                )
                self._conn.execute("COMMIT")
            except sqlite3.Error:
                if self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                raise

    def count(self, fingerprint: str | None = None) -> int:
        with self._lock, self._guard("read"):
            if fingerprint is None:
                row = self._conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM embeddings WHERE fingerprint=?", [fingerprint]
                ).fetchone()
        return int(row[0])

    def clear(self, fingerprint: str | None = None) -> None:
        with self._lock, self._guard("write"):
            if fingerprint is None:
                self._conn.execute("DELETE FROM embeddings")
            else:
                self._conn.execute("DELETE FROM embeddings WHERE fingerprint=?", [fingerprint])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r}, dtype={self.dtype!r})"


def _decode(blob: bytes, dim: int) -> np.ndarray | None:
    if len(blob) == dim * 2:
        return np.frombuffer(blob, dtype=np.float16).astype(np.float32)
    if len(blob) == dim * 4:
        return np.frombuffer(blob, dtype=np.float32).copy()
    return None  # a vector of another width: treat as missing
