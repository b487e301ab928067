"""One label and one label path judged: what a label value may be, a set of labels per
text, and hierarchical label paths (their nodes and parents). Needs numpy only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._text import unicode_problem
from ..errors import ConfigError, DataError

__all__ = [
    "LABEL_SETS",
    "PATH_SEP",
    "SCALAR_LABELS",
    "check_path_sep",
    "expand_paths",
    "label_problem",
    "label_sets",
    "node_depths",
    "parent_index",
]

PATH_SEP = "::"  # a hierarchical label's parts: "role::program" is in "role"
SCALAR_LABELS = (str, int, float, bool, np.integer, np.floating, np.bool_)
LABEL_SETS = (list, tuple, set, frozenset)  # what holds one text's labels


def label_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a label, as the end of a sentence ("is ...", "holds
    ..."); None when it can. The one judgement of a label value."""
    if isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"is {value!r}, not a finite number"
    if isinstance(value, str):
        if not value:
            return "is an empty string"
        return unicode_problem(value)
    return f"is a {type(value).__name__}; a label is a string, number or boolean"


def label_sets(labels: Sequence[Any]) -> list[list[Any]]:
    """Multilabel labels as one list of labels per text (lists, tuples and sets taken)."""
    out = []
    for i, labs in enumerate(labels):
        if isinstance(labs, str | bytes) or not isinstance(labs, Sequence | set | frozenset):
            raise DataError(
                f"multilabel target #{i} must be a list of labels, got {type(labs).__name__}"
            )
        out.append(list(labs))
    return out


def check_path_sep(sep: object) -> str:
    """A hierarchical head's path separator: a non-empty string without whitespace."""
    if not isinstance(sep, str) or not sep or sep != sep.strip():
        raise ConfigError(
            f"the label path separator must be a non-empty string without spaces, got {sep!r}"
        )
    return sep


def expand_paths(paths: Any, sep: str, where: str = "") -> list[str]:
    """One text's label paths with every ancestor, each node once, in first-seen order
    (``["role::program"]`` -> ``["role", "role::program"]``); a path with an empty part
    is a :class:`DataError`."""
    out: dict[str, None] = {}
    for path in [paths] if isinstance(paths, str) else paths:
        if not isinstance(path, str):
            raise DataError(f"{where}label path {path!r} is not text")
        parts = path.split(sep)
        if any(not p.strip() for p in parts):
            raise DataError(f"{where}label path {path!r} has an empty part (separator {sep!r})")
        for depth in range(1, len(parts) + 1):
            out.setdefault(sep.join(parts[:depth]), None)
    return list(out)


def parent_index(labels: Sequence[Any], sep: str) -> np.ndarray:
    """For each label, the index of its parent among ``labels`` (-1 for a root); every
    parent must be a label itself (a :class:`DataError` names the first missing)."""
    index = {str(lab): i for i, lab in enumerate(labels)}
    parents = np.full(len(labels), -1, dtype=np.int64)
    for i, lab in enumerate(labels):
        head, found, _ = str(lab).rpartition(sep)
        if found:
            if head not in index:
                raise DataError(f"label {lab!r} has no parent {head!r} among the labels")
            parents[i] = index[head]
    return parents


def node_depths(parents: np.ndarray) -> np.ndarray:
    """Each label's depth from its parent indexes (-1: a root, depth 1)."""
    depth = np.ones(len(parents), dtype=np.int64)
    for label in range(len(parents)):
        node = int(parents[label])
        while node >= 0:
            depth[label] += 1
            node = int(parents[node])
    return depth
