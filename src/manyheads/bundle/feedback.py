"""A bundle's corrections (feedback), kept in its folder: ``feedback/rows.jsonl``.

One JSON object per line, appended and never edited in place::

    {"id": 17, "time": "2026-12-06T10:00:00+00:00", "text": "...", "labels": {"lang": "fr"}}

``id`` counts up from 1 across the folder's life. A write holds the folder's writers'
lock (:func:`~manyheads.bundle.store.folder_lock`: every process and thread on the
folder, replicas on a shared file system included), appends every row of the call in
one write, and returns only after ``fsync``: a row acknowledged is on disk. A writer
killed mid-write leaves at most an unfinished last line, which no reader counts and the
next writer cuts off before appending (it was never acknowledged).

The log is bounded (:class:`FeedbackLimits`: rows and bytes); a full log refuses new
rows in one line (:class:`FeedbackFullError`) until an update folds the rows into the
heads' kept training data and drops them (:func:`drop_rows`).

The rows a head's updates have used are counted in its info: ``feedback`` =
``{"through": ID, "tried": ID}``: rows up to ``through`` are in its kept data, rows
up to ``tried`` were judged by the last update (promoted or not).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._io import atomic_write_bytes, fsync_dir
from .._text import loads_json
from ..errors import BundleError, ConfigError, DataError
from ..heads.kinds import check_labels, kind_of
from .store import folder_lock, own_path

__all__ = [
    "FEEDBACK_FILE",
    "FeedbackFullError",
    "FeedbackLimits",
    "FeedbackRow",
    "append_rows",
    "check_feedback",
    "drop_rows",
    "pending_counts",
    "read_rows",
    "rows_per_head",
    "update_lock",
]

FEEDBACK_DIR = "feedback"
FEEDBACK_FILE = f"{FEEDBACK_DIR}/rows.jsonl"
UPDATE_LOCK = ".update-lock"  # held by the one update running on the folder
FLOOR_FILE = f"{FEEDBACK_DIR}/last-id.json"  # the last id given, once its row is dropped


class FeedbackFullError(DataError):
    """The bundle's feedback log holds as many rows (or bytes) as its cap allows."""


@dataclass(frozen=True)
class FeedbackLimits:
    """Caps on a bundle's kept corrections: rows and bytes in the log, characters a text."""

    max_rows: int = 100_000
    max_bytes: int = 256 * 1024 * 1024
    max_chars: int = 100_000

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_bytes", "max_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class FeedbackRow:
    """One kept correction: its id, when it came, its text and a label per head."""

    id: int
    time: str
    text: str
    labels: Mapping[str, Any]


def _head_labels(
    name: str, info: Mapping[str, Any], known: Sequence[Any], path_sep: str | None
) -> Callable[[list[Any]], None]:
    """The check of head ``name``'s corrections: labels of its kind, known to it (a
    multiclass head may learn a new class)."""
    kind = kind_of(str(info.get("kind")))

    def check(labels: list[Any]) -> None:
        check_labels(name, kind, labels)
        if kind.open_classes:
            return
        new = kind.unseen(labels, set(known), path_sep or "::")
        if new:
            raise DataError(
                f"head {name!r}: label {new[0]!r} is not one of its labels; a {kind} head "
                "learns corrections among the labels it has (train it again to add labels)"
            )

    return check


def check_feedback(
    texts: Sequence[str],
    labels: Mapping[str, Sequence[Any]],
    heads: Mapping[str, tuple[Mapping[str, Any], Sequence[Any], str | None]],
    limits: FeedbackLimits,
) -> list[dict[str, Any]]:
    """The rows (``{"text", "labels"}``) of corrections ``labels[head][i]`` of
    ``texts[i]`` (``None``: no correction of that head), every one checked against
    ``heads`` (name: its info, its labels, its path separator) before any is kept.
    One :class:`DataError` naming the first problem."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise DataError("feedback texts must be a list of strings")
    if not isinstance(labels, Mapping) or not labels:
        raise DataError("feedback needs labels: a mapping of head name to one label per text")
    if not texts:
        raise DataError("no feedback rows given")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise DataError(f"feedback text #{i} is {type(text).__name__}, not a string")
        if not text.strip():
            raise DataError(f"feedback text #{i} is empty")
        if len(text) > limits.max_chars:
            raise DataError(
                f"feedback text #{i} is longer than {limits.max_chars} characters "
                "(the max_chars limit)"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(f"feedback text #{i} is not valid Unicode (a lone surrogate)") from None
    rows: list[dict[str, Any]] = [{"text": t, "labels": {}} for t in texts]
    for name, values in labels.items():
        if name not in heads:
            raise DataError(
                f"feedback names unknown head {name!r}; the bundle has: " + ", ".join(heads)
            )
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise DataError(f"head {name!r}: feedback labels must be a list, one per text")
        if len(values) != len(texts):
            raise DataError(f"head {name!r}: {len(values)} feedback labels for {len(texts)} texts")
        given = [i for i, v in enumerate(values) if v is not None]
        _head_labels(name, *heads[name])([values[i] for i in given])
        for i in given:
            rows[i]["labels"][name] = values[i]
    kept = [r for r in rows if r["labels"]]
    if not kept:
        raise DataError("no feedback rows with a label")
    return kept


def _path(folder: Path) -> Path:
    return own_path(folder, FEEDBACK_FILE)


def _lines(path: Path, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(end offset, line)`` of each finished line of ``path`` from byte ``start`` on
    (none if it is missing)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    with fh:
        fh.seek(start)
        offset = start
        for line in fh:
            if not line.endswith(b"\n"):
                return  # a writer killed mid-line: never acknowledged
            offset += len(line)
            yield offset, line


def _parse(line: bytes, path: Path) -> FeedbackRow:
    try:
        doc = loads_json(line)
        return FeedbackRow(int(doc["id"]), str(doc["time"]), str(doc["text"]), dict(doc["labels"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: a feedback row cannot be read ({exc})") from None


@dataclass(frozen=True)
class _Read:
    """A log as read up to byte ``end`` of the file ``ino`` (appends only add to it;
    a rewrite is another file)."""

    ino: int
    end: int
    rows: tuple[FeedbackRow, ...]


_READ: dict[str, _Read] = {}
_READ_GUARD = threading.Lock()


def _scan(path: Path) -> _Read:
    """The finished rows of the log at ``path``: only what was appended since it was
    last read here is parsed (a service counts its corrections often)."""
    key = os.path.realpath(path)
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return _Read(0, 0, ())
    ino = stat.st_ino
    with _READ_GUARD:
        known = _READ.get(key)
    if known is None or known.ino != ino or stat.st_size < known.end:
        known = _Read(ino, 0, ())
    rows, end = list(known.rows), known.end
    for end, line in _lines(path, known.end):  # noqa: B007 (the last end is kept)
        rows.append(_parse(line, path))
    found = _Read(ino, end, tuple(rows))
    with _READ_GUARD:
        _READ[key] = found
    return found


def read_rows(folder: Path) -> list[FeedbackRow]:
    """Every kept correction of the bundle at ``folder``, oldest first."""
    return list(_scan(_path(folder)).rows)


def _floor(folder: Path) -> int:
    """The last id given before the log was last rewritten (ids never repeat)."""
    try:
        doc = loads_json(own_path(folder, FLOOR_FILE).read_bytes())
        return int(doc["last_id"])
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{folder / FLOOR_FILE} cannot be read ({exc})") from None


def _tail(folder: Path, path: Path) -> tuple[int, int, int]:
    """``(rows, last id, end of the last finished line)`` of the log at ``path``."""
    found = _scan(path)
    last = found.rows[-1].id if found.rows else _floor(folder)
    return len(found.rows), last, found.end


def append_rows(folder: Path, rows: Sequence[Mapping[str, Any]], limits: FeedbackLimits) -> int:
    """Append checked rows (:func:`check_feedback`) to the log of ``folder``, durably;
    the id of the last. Refuses (:class:`FeedbackFullError`, nothing written) rows
    that would take the log over its caps."""
    path = _path(folder)
    with folder_lock(folder):
        path.parent.mkdir(exist_ok=True)
        n, last, end = _tail(folder, path)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        blob = b"".join(
            json.dumps(
                {"id": last + i + 1, "time": now, "text": r["text"], "labels": r["labels"]},
                ensure_ascii=False,
            ).encode("utf-8")
            + b"\n"
            for i, r in enumerate(rows)
        )
        if n + len(rows) > limits.max_rows or end + len(blob) > limits.max_bytes:
            raise FeedbackFullError(
                f"the bundle's feedback is full: {n} rows ({end} bytes) kept, "
                f"{len(rows)} more would pass its cap of {limits.max_rows} rows / "
                f"{limits.max_bytes} bytes; run `manyheads update` to fold them into the heads"
            )
        fresh = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            os.truncate(fd, end)  # an unfinished line of a killed writer goes
            os.lseek(fd, end, os.SEEK_SET)
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if fresh:
            fsync_dir(path.parent)
        return last + len(rows)


@contextlib.contextmanager
def update_lock(folder: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the lock that lets one update of the bundle at ``folder`` run at a time
    (every process on the folder); ``wait=False``: refuse at once when it is held."""
    path = own_path(folder, UPDATE_LOCK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise BundleError(f"another update of {folder} is running; try again later") from None
        yield
    finally:
        os.close(fd)


def rows_per_head(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``rows`` (``{"text", "labels"}``) correct each head."""
    counts: dict[str, int] = {}
    for row in rows:
        for head in row["labels"]:
            counts[head] = counts.get(head, 0) + 1
    return counts


def pending_counts(
    rows: Sequence[FeedbackRow], seen: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per head named by ``rows``: ``total`` corrections kept, ``pending`` (not in its
    kept data: after ``seen[head]["through"]``) and ``new`` (not judged by an update:
    after ``seen[head]["tried"]``)."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        for head in row.labels:
            c = counts.setdefault(head, {"total": 0, "pending": 0, "new": 0})
            mark = seen.get(head, {})
            c["total"] += 1
            c["pending"] += row.id > int(mark.get("through", 0))
            c["new"] += row.id > int(mark.get("tried", 0))
    return counts


def drop_rows(folder: Path, done: Callable[[FeedbackRow], bool]) -> int:
    """Rewrite the log of ``folder`` without the rows ``done`` says are folded in (and
    without what no head needs); the rows dropped. Holds the folder's lock; the
    rewrite is atomic."""
    path = _path(folder)
    with folder_lock(folder):
        lines = list(_lines(path))
        keep = [line for _, line in lines if not done(_parse(line, path))]
        if len(keep) == len(lines):
            return 0
        last = _tail(folder, path)[1]
        atomic_write_bytes(own_path(folder, FLOOR_FILE), json.dumps({"last_id": last}).encode())
        atomic_write_bytes(path, b"".join(keep))
        return len(lines) - len(keep)
