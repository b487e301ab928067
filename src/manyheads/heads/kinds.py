"""What a head is asked to be, judged in one place: its kind, its type, its name, its
labels. Every way in (``fit_head``, ``manyheads train``, the service, fine-tuning,
the byte trunk's training) asks these functions, so each mistake has one message.
Needs numpy only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._text import unicode_problem
from ..errors import ConfigError, DataError

__all__ = [
    "HEAD_TYPES",
    "KINDS",
    "PATH_SEP",
    "SET_KINDS",
    "STORED_HEAD_TYPES",
    "check_head_name",
    "check_head_type",
    "check_kind",
    "check_labels",
    "check_path_sep",
    "distinct_labels",
    "expand_paths",
    "head_type_problem",
    "kind_problem",
    "label_problem",
    "label_sets",
    "node_depths",
    "parent_index",
]

KINDS = ("multiclass", "binary", "multilabel", "hierarchical")
# kinds whose answer is a set of labels (a 0/1 row): a hierarchical head is a multilabel
# head over every node of its label paths, decided top-down
SET_KINDS = ("multilabel", "hierarchical")
PATH_SEP = "::"  # a hierarchical label's parts: "role::program" is in "role"
# what fit_head takes: a head fused into the one matrix product, a small MLP, or the
# better of both on the validation split; a stored head is linear or mlp
HEAD_TYPES = ("linear", "mlp", "auto")
STORED_HEAD_TYPES = ("linear", "mlp")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_SCALAR = (str, int, float, bool, np.integer, np.floating, np.bool_)
_SETS = (list, tuple, set, frozenset)


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


def kind_problem(kind: object) -> str | None:
    """Why ``kind`` is not a head kind (a sentence that names the value), or None."""
    if isinstance(kind, str) and kind in KINDS:
        return None
    return f"kind must be one of {', '.join(KINDS)}, got {kind!r}"


def check_kind(kind: object, where: str = "head") -> str:
    """``kind``, or :class:`ConfigError` (``where``: what it belongs to, e.g. ``"task
    'topic':"``)."""
    problem = kind_problem(kind)
    if problem is not None:
        raise ConfigError(f"{where} {problem}")
    return str(kind)


def head_type_problem(head: object) -> str | None:
    """Why ``head`` is not a head type ``fit_head`` takes, or None."""
    if isinstance(head, str) and head in HEAD_TYPES:
        return None
    return f"head type must be one of {', '.join(HEAD_TYPES)}, got {head!r}"


def check_head_type(head: object) -> str:
    problem = head_type_problem(head)
    if problem is not None:
        raise ConfigError(problem)
    return str(head)


def check_head_name(name: object) -> str:
    """A head name: 1-64 letters, digits, ``_``, ``-`` or ``.``, starting with a letter
    or digit (it names files and URL paths)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise DataError(
            f"invalid head name {name!r}: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


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


def distinct_labels(kind: str, labels: Sequence[Any]) -> list[Any]:
    """The distinct labels of a head's training labels, in first-seen order."""
    if kind in SET_KINDS:
        seen = (v for labs in labels for v in ([labs] if isinstance(labs, str) else labs))
        return list(dict.fromkeys(seen))
    return list(dict.fromkeys(labels))


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


def check_labels(name: str, kind: str, labels: Sequence[Any]) -> None:
    """Multiclass / binary labels are single values; multilabel labels are lists of them;
    a label is valid Unicode text, a finite number or a boolean; a string and a number
    that read the same are not both labels."""
    for i, label in enumerate(labels):
        for value in label if isinstance(label, _SETS) else [label]:
            # text and numbers are judged as every label is; other types get the
            # kind-specific messages below
            if isinstance(value, np.floating):
                value = float(value)
            problem = label_problem(value) if isinstance(value, str | float) else None
            if problem is not None:
                raise DataError(f"head {name!r}: label #{i} {problem}")
        if kind in SET_KINDS:
            allowed = str if kind == "hierarchical" else _SCALAR
            ok = isinstance(label, str) or (
                isinstance(label, _SETS) and all(isinstance(v, allowed) for v in label)
            )
            if not ok:
                what = "label paths (text)" if kind == "hierarchical" else "labels"
                raise DataError(
                    f"head {name!r}: label #{i} is {label!r}; a {kind} head takes a list "
                    f"of {what} per text"
                )
        elif not isinstance(label, _SCALAR):
            raise DataError(
                f"head {name!r}: label #{i} is {label!r}; a {kind} head takes one label "
                "(a string or number) per text"
                + ("; use kind 'multilabel' for lists" if isinstance(label, list) else "")
            )
    _check_one_spelling(name, labels)


def _check_one_spelling(name: str, labels: Sequence[Any]) -> None:
    """Refuse a string and a number that read the same (``1`` and ``"1"``): they would
    be two classes that every answer prints alike."""
    seen: dict[str, tuple[Any, int]] = {}
    for i, label in enumerate(labels):
        for value in label if isinstance(label, _SETS) else [label]:
            first, at = seen.setdefault(str(value), (value, i))
            if isinstance(first, str) != isinstance(value, str):
                raise DataError(
                    f"head {name!r}: label #{at} is {first!r} and label #{i} is {value!r}: "
                    "a string and a number that read the same would be two classes; "
                    "give every label as the same type"
                )
