"""A bundle in production: its corrections (:mod:`~manyheads.bundle.feedback`) and its
heads' generations (:mod:`~manyheads.bundle.history`): promoting an updated head (its
predecessor kept in its history), recording which corrections an update judged,
rolling a head back to a kept generation, listing them. :class:`InProduction` gives a
:class:`~manyheads.bundle.Bundle` these as methods; the functions work on a bundle in
memory and leave saving to the caller."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import BundleError, DataError
from .entry import head_from_export
from .feedback import (
    FeedbackLimits,
    FeedbackRow,
    append_rows,
    check_feedback,
    drop_rows,
    pending_counts,
    read_rows,
    rows_per_head,
)
from .format import KeptData
from .history import KEEP, generation_of, history_entry, read_generation

__all__ = [
    "InProduction",
    "drop_folded",
    "folder_of",
    "head_history",
    "mark_feedback",
    "promote_head",
    "rollback_head",
]


def folder_of(bundle: Any) -> Path:
    if bundle.path is None:
        raise BundleError(
            "the bundle is not saved yet; save it to a folder first (its corrections and "
            "history are kept there)"
        )
    return Path(bundle.path)


def promote_head(
    bundle: Any,
    name: str,
    candidate: Any,
    marks: dict[str, int],
    why: str,
    keep: int = KEEP,
    data: KeptData | None = None,
) -> int:
    """Put ``candidate``'s head ``name`` in ``bundle`` as the next generation, keeping
    ``data`` as its training data (default: the candidate's); the head it replaces
    goes into the history (at most ``keep`` generations kept). Returns the new
    generation."""
    folder = folder_of(bundle)
    info = bundle.head_info[name]
    entry = history_entry(folder, bundle.export_head(name), info, why)
    new_info = dict(candidate.head_info[name])
    new_info.pop("data", None)
    generation = max([generation_of(info), *(e["generation"] for e in _entries(info))]) + 1
    new_info["generation"] = generation
    new_info["history"] = [entry, *_entries(info)][:keep]
    new_info["feedback"] = dict(marks)
    new_info["last_update"] = _last_update(True, why, marks)
    if data is None:
        rel = candidate.head_info[name].get("data")
        data = None if rel is None else candidate.state.data.get(rel)
    bundle.add_head(name, candidate.heads[name], info=new_info, data=data)
    return generation


def _last_update(promoted: bool, why: str, marks: dict[str, int]) -> dict[str, Any]:
    return {
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "promoted": promoted,
        "why": why,
        "through": marks.get("tried", 0),
    }


def mark_feedback(bundle: Any, name: str, marks: dict[str, int], why: str) -> None:
    """Record in head ``name``'s info which corrections an update judged, and why it
    kept the head."""
    info = dict(bundle.head_info[name])
    info["feedback"] = dict(marks)
    info["last_update"] = _last_update(False, why, marks)
    bundle.add_head(name, bundle.heads[name], info=info)


def _entries(info: dict[str, Any]) -> list[dict[str, Any]]:
    found = info.get("history")
    return list(found) if isinstance(found, list) else []


def head_history(bundle: Any, name: str) -> list[dict[str, Any]]:
    """Head ``name``'s generations, the current one first: generation, current, when
    it was created or replaced, why, and its validation metrics where known."""
    if name not in bundle.heads:
        raise bundle._unknown(name)
    info = bundle.head_info[name]
    rows = [
        {
            "generation": generation_of(info),
            "current": True,
            "created": info.get("created"),
            "n_train": info.get("n_train"),
            "metrics": info.get("metrics", {}),
        }
    ]
    for e in _entries(info):
        rows.append(
            {
                "generation": e["generation"],
                "current": False,
                "replaced": e.get("replaced"),
                "why": e.get("why"),
            }
        )
    return rows


def rollback_head(bundle: Any, name: str, to: int | None = None, keep: int = KEEP) -> int:
    """Make generation ``to`` (default: the one before the current) head ``name``'s
    current one again, exactly as it was; the current one goes into the history.
    Returns the generation now current."""
    if name not in bundle.heads:
        raise bundle._unknown(name)
    folder = folder_of(bundle)
    info = bundle.head_info[name]
    entries = _entries(info)
    if not entries:
        raise DataError(f"head {name!r} has no earlier generation to roll back to")
    if to is None:
        chosen = entries[0]
    else:
        if isinstance(to, bool) or not isinstance(to, int):
            raise DataError(f"a generation is a whole number, got {to!r}")
        found = [e for e in entries if e["generation"] == to]
        if not found:
            kept = ", ".join(str(e["generation"]) for e in entries)
            raise DataError(
                f"head {name!r} keeps no generation {to}; it is at generation "
                f"{generation_of(info)} and keeps {kept}"
            )
        chosen = found[0]
    record, tensors = read_generation(folder, chosen, name)
    _, head, restored = head_from_export(name, record, tensors)
    why = f"rolled back to generation {chosen['generation']}"
    current = history_entry(folder, bundle.export_head(name), info, why)
    others = [e for e in entries if e is not chosen]
    restored["generation"] = chosen["generation"]
    restored["history"] = [current, *others][:keep]
    if info.get("feedback"):
        restored["feedback"] = info["feedback"]  # the corrections used stay used
    if isinstance(chosen.get("data"), str):
        restored["data"] = chosen["data"]
    bundle.add_head(name, head, info=restored)
    return int(chosen["generation"])


def drop_folded(bundle: Any, folder: Path) -> int:
    """Drop from the folder's feedback log the rows every head they label has folded
    into its kept data (and labels of heads the bundle no longer has)."""
    through = {
        n: int((i.get("feedback") or {}).get("through", 0)) for n, i in bundle.head_info.items()
    }

    def done(row: FeedbackRow) -> bool:
        return all(h not in through or row.id <= through[h] for h in row.labels)

    return drop_rows(folder, done)


class InProduction:
    """The methods of a bundle in production (a :class:`~manyheads.bundle.Bundle`'s)."""

    heads: Any
    head_info: Any
    labels: Any
    save: Any
    _lock: Any

    def add_feedback(
        self,
        texts: Sequence[str],
        labels: Mapping[str, Sequence[Any]],
        *,
        limits: FeedbackLimits | None = None,
    ) -> dict[str, int]:
        """Keep corrections with the saved bundle: ``labels[head][i]`` is the label
        ``texts[i]`` should have had from ``head`` (``None``: no correction). Every
        row is checked first (:meth:`check_feedback`); on disk (fsync'd) when this
        returns. Returns the rows kept per head. See :mod:`manyheads.bundle.feedback`."""
        rows = self.check_feedback(texts, labels, limits=limits)
        return self.keep_feedback(rows, limits=limits)

    def check_feedback(
        self,
        texts: Sequence[str],
        labels: Mapping[str, Sequence[Any]],
        *,
        limits: FeedbackLimits | None = None,
    ) -> list[dict[str, Any]]:
        """The rows of corrections as :meth:`add_feedback` keeps them, checked (known
        heads; labels of the head's kind, known to it, but a multiclass head may
        learn a new class); one :class:`~manyheads.errors.DataError` otherwise."""
        heads = {
            n: (self.head_info[n], self.labels(n), getattr(h, "path_sep", None))
            for n, h in self.heads.items()
        }
        return check_feedback(texts, labels, heads, limits or FeedbackLimits())

    def keep_feedback(
        self, rows: Sequence[Mapping[str, Any]], *, limits: FeedbackLimits | None = None
    ) -> dict[str, int]:
        """Append rows :meth:`check_feedback` made to the saved bundle's log, durably;
        the rows kept per head."""
        append_rows(folder_of(self), rows, limits or FeedbackLimits())
        return rows_per_head(rows)

    def feedback_rows(self) -> list[FeedbackRow]:
        """The corrections kept with the saved bundle, oldest first."""
        return read_rows(folder_of(self))

    def feedback_counts(self) -> dict[str, dict[str, int]]:
        """Per head with corrections: ``total`` kept, ``pending`` (not yet in its kept
        data), ``new`` (not yet judged by an update)."""
        seen = {n: dict(i.get("feedback") or {}) for n, i in self.head_info.items()}
        return pending_counts(self.feedback_rows(), seen)

    def drop_folded(self) -> int:
        """Drop from the saved bundle's log the corrections every head they label has
        folded into its kept data (call it after saving); the rows dropped."""
        return drop_folded(self, folder_of(self))

    def promote_head(
        self,
        name: str,
        candidate: Any,
        marks: dict[str, int],
        why: str,
        *,
        keep: int = KEEP,
        data: KeptData | None = None,
    ) -> int:
        """Make ``candidate``'s head ``name`` this bundle's next generation of it (the
        current one kept in its history, at most ``keep`` generations), ``data`` its
        kept training data (default: the candidate's); the new generation."""
        return promote_head(self, name, candidate, marks, why, keep, data)

    def mark_feedback(self, name: str, marks: dict[str, int], why: str) -> None:
        """Record which corrections an update of head ``name`` judged, and why it kept
        the head."""
        mark_feedback(self, name, marks, why)

    def head_history(self, name: str) -> list[dict[str, Any]]:
        """Head ``name``'s generations, the current one first."""
        return head_history(self, name)

    def rollback_head(self, name: str, to: int | None = None, *, save: bool = True) -> int:
        """Make an earlier generation of head ``name`` (default: the previous) current
        again, answering exactly as it did, and save (unless ``save=False``); the
        generation now current."""
        folder = folder_of(self)
        with self._lock:
            generation = rollback_head(self, name, to)
            if save:
                self.save(folder)
        return generation
