"""A head's earlier generations, kept in its bundle folder so it can be rolled back.

A head's info counts its ``generation`` (1 when it is trained; each promoted update and
each rollback gives the next). When an update replaces a head, the head it replaces is
written whole (its record and info in the metadata, its tensors) to
``history/head-SHA.safetensors`` (named by its content, written atomically before any
document names it), and the new head's info lists it under ``history``, newest first::

    "history": [{"generation": 2, "file": "history/head-0123456789ab.safetensors",
                 "sha256": "...", "data": "data/....jsonl.gz", "replaced": "2026-...",
                 "why": "update: 0.912 -> 0.935 on 240 rows"}]

A bundle keeps ``keep`` generations a head (default :data:`KEEP`); a save's garbage
collection removes the files (and kept training data) no entry names any more.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .._io import write_hashed
from .._text import loads_json
from ..errors import BundleError, DataError
from .state import Record
from .store import BUNDLE_JSON, HISTORY_DIR, header_metadata, own_path

__all__ = ["KEEP", "generation_of", "history_entry", "read_generation"]

KEEP = 5
HISTORY_KIND = ("head", ".safetensors")


def generation_of(info: Mapping[str, Any]) -> int:
    """A head's generation (1 for a head that never changed)."""
    found = info.get("generation", 1)
    return found if isinstance(found, int) and not isinstance(found, bool) else 1


def history_entry(
    folder: Path, record: Record, info: Mapping[str, Any], why: str
) -> dict[str, Any]:
    """Write head ``record`` (with ``info``, its history left out) into ``folder``'s
    history and return the entry its successor lists."""
    from safetensors.numpy import save

    head, tensors = record
    whole = {**dict(info), **dict(head)}
    whole.pop("history", None)
    blob = save(
        {k: np.ascontiguousarray(v) for k, v in tensors.items()},
        metadata={"manyheads_head": json.dumps(whole, sort_keys=True)},
    )
    target = own_path(folder, HISTORY_DIR)
    target.mkdir(exist_ok=True)
    name, sha = write_hashed(target, blob, HISTORY_KIND)
    entry: dict[str, Any] = {
        "generation": generation_of(info),
        "file": f"{HISTORY_DIR}/{name}",
        "sha256": sha,
        "replaced": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "why": why,
    }
    if isinstance(info.get("data"), str):
        entry["data"] = info["data"]
    return entry


def read_generation(folder: Path, entry: Mapping[str, Any], name: str) -> tuple[dict, dict]:
    """``(record with info, tensors)`` of head ``name`` as its history ``entry`` kept
    it, checked against the entry's SHA-256."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    path = own_path(folder, str(entry["file"]))
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise BundleError(
            f"cannot read generation {entry['generation']} of head {name!r} ({path}): "
            f"{exc.strerror or exc}"
        ) from None
    if hashlib.sha256(blob).hexdigest() != entry.get("sha256"):
        raise BundleError(
            f"{path}: generation {entry['generation']} of head {name!r} does not match the "
            f"SHA-256 {folder / BUNDLE_JSON} names"
        )
    meta = header_metadata(blob, path)
    try:
        record = loads_json(meta["manyheads_head"])
        tensors = load(blob)
    except (SafetensorError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{path}: not a kept generation of a head ({exc})") from None
    return record, tensors
