"""Splitting rows into train and validation (grouped, stratified), checking groups, and
the hash that names a training set."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._text import unicode_problem
from ..errors import ConfigError, DataError

__all__ = ["check_groups", "data_hash", "split_indices"]


def split_indices(
    n: int,
    *,
    stratify: Sequence[Any] | None = None,
    groups: Sequence[Any] | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Train / validation row indices.

    With ``groups``: no group is on both sides (``GroupShuffleSplit``). Else
    stratified by ``stratify`` when every class has at least two rows, else
    a plain shuffle split.
    """
    from sklearn.model_selection import GroupShuffleSplit, ShuffleSplit, StratifiedShuffleSplit

    if not 0 < val_fraction < 1:
        raise ConfigError(f"val_fraction must be between 0 and 1, got {val_fraction!r}")
    if n < 2:
        raise DataError(f"need at least 2 rows to split into train and validation, got {n}")
    X = np.zeros((n, 1))
    if groups is not None:
        if len(set(groups)) < 2:
            raise DataError("all rows share one group; a grouped split needs at least two groups")
        splitter: Any = GroupShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed)
        train, val = next(splitter.split(X, groups=list(groups)))
    else:
        y = None
        if stratify is not None:
            _, counts = np.unique(
                np.asarray(stratify, dtype=object).astype(str), return_counts=True
            )
            n_val = int(np.ceil(val_fraction * n))
            if counts.min() >= 2 and len(counts) <= n_val and len(counts) <= n - n_val:
                y = np.asarray(stratify, dtype=object).astype(str)
        if y is not None:
            splitter = StratifiedShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed)
            train, val = next(splitter.split(X, y))
        else:
            splitter = ShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed)
            train, val = next(splitter.split(X))
    return np.sort(train), np.sort(val)


def data_hash(texts: Sequence[str], labels: Sequence[Any]) -> str:
    """sha256 of training texts and labels (order-sensitive): names a kept training set.
    Each row adds its text (UTF-8), a NUL, its label as JSON (sorted keys) and a 0x01."""
    import hashlib

    h = hashlib.sha256()
    spelt: dict[str, bytes] = {}  # a text label's JSON, once per distinct label
    parts: list[bytes] = []
    for text, label in zip(texts, labels, strict=True):
        if isinstance(label, str):
            found = spelt.get(label)
            if found is None:
                found = spelt[label] = json.dumps(label).encode()
        else:
            found = json.dumps(label, sort_keys=True, default=str).encode()
        parts += (text.encode("utf-8", "surrogatepass"), b"\x00", found, b"\x01")
        if len(parts) >= 4096:
            h.update(b"".join(parts))
            parts.clear()
    h.update(b"".join(parts))
    return h.hexdigest()


def check_groups(groups: Sequence[Any], n_texts: int, where: str) -> list[Any]:
    """Groups of ``n_texts`` texts: one each, a string (valid Unicode) or an integer."""
    groups = list(groups)
    if len(groups) != n_texts:
        raise DataError(f"{where}: {n_texts} texts but {len(groups)} groups")
    for i, g in enumerate(groups):
        if isinstance(g, bool) or not isinstance(g, str | int | np.integer):
            raise DataError(
                f"{where}: group #{i} is {str(g)[:40]}; a group is a string or an integer"
            )
        if isinstance(g, str) and unicode_problem(g) is not None:
            raise DataError(f"{where}: group #{i} {unicode_problem(g)}")
    return groups
