"""What a head is asked to be, judged in one place: its kind, its type, its name, its
labels. Every way in (``fit_head``, ``manyheads train``, the service, fine-tuning,
the byte trunk's training) asks these functions, so each mistake has one message.

The kinds are objects (:class:`~manyheads.heads.kind.Kind`), one per name in
:data:`KINDS`; a new kind is a subclass and one :func:`register` call. Needs numpy only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from .head_types import HEAD_TYPE_REGISTRY
from .kind import ABSENT, BINARY, MULTICLASS, Binary, Kind, Multiclass
from .kind_sets import HIERARCHICAL, MULTILABEL, Hierarchical, Multilabel
from .labels import (
    LABEL_SETS,
    PATH_SEP,
    check_path_sep,
    expand_paths,
    label_problem,
    label_sets,
    node_depths,
    parent_index,
)

__all__ = [
    "ABSENT",
    "BINARY",
    "HEAD_TYPES",
    "HIERARCHICAL",
    "KINDS",
    "MULTICLASS",
    "MULTILABEL",
    "PATH_SEP",
    "SET_KINDS",
    "STORED_HEAD_TYPES",
    "Binary",
    "Hierarchical",
    "Kind",
    "Multiclass",
    "Multilabel",
    "check_head_name",
    "check_kind",
    "check_labels",
    "check_path_sep",
    "distinct_labels",
    "expand_paths",
    "kind_of",
    "kind_problem",
    "label_problem",
    "label_sets",
    "node_depths",
    "parent_index",
    "register",
]

# every kind by its name (the name is what bundle.json and the answers hold)
KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add ``kind`` to :data:`KINDS` under its name (replacing one of that name);
    returns it."""
    if not isinstance(kind, Kind):
        raise TypeError(f"a head kind is a Kind, got {type(kind).__name__}")
    KINDS[kind.name] = kind
    return kind


for _kind in (MULTICLASS, BINARY, MULTILABEL, HIERARCHICAL):
    register(_kind)

# the names of the kinds whose answer is a set of labels (a 0/1 row): a hierarchical
# head is a multilabel head over every node of its label paths, decided top-down
SET_KINDS = tuple(name for name, kind in KINDS.items() if kind.is_set)
# what fit_head takes: a stored head type (a head fused into the one matrix product, a
# small MLP: heads/head_types.py) or the better of them on the validation split
STORED_HEAD_TYPES = tuple(HEAD_TYPE_REGISTRY)
HEAD_TYPES = (*STORED_HEAD_TYPES, "auto")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def _registered(kind: object) -> Kind | None:
    return KINDS.get(str.__str__(kind)) if isinstance(kind, str) else None


def kind_problem(kind: object) -> str | None:
    """Why ``kind`` is not a head kind (a sentence that names the value), or None."""
    if _registered(kind) is not None:
        return None
    return f"kind must be one of {', '.join(KINDS)}, got {kind!r}"


def check_kind(kind: object, where: str = "head") -> Kind:
    """The :class:`Kind` named ``kind`` (a name or a Kind), or :class:`ConfigError`
    (``where``: what it belongs to, e.g. ``"task 'topic':"``)."""
    found = _registered(kind)
    if found is None:
        raise ConfigError(f"{where} {kind_problem(kind)}")
    return found


def kind_of(kind: str) -> Kind:
    """The :class:`Kind` of a name (or of a Kind); :class:`ConfigError` for none."""
    return check_kind(kind)


def check_head_name(name: object) -> str:
    """A head name: 1-64 letters, digits, ``_``, ``-`` or ``.``, starting with a letter
    or digit (it names files and URL paths)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise DataError(
            f"invalid head name {name!r}: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


def distinct_labels(kind: str, labels: Sequence[Any]) -> list[Any]:
    """The distinct labels of a head's training labels, in first-seen order."""
    return kind_of(kind).distinct(labels)


# labels of these exact types are judged once per distinct value (a head's labels
# repeat: thousands of rows, tens of classes)
_REPEATED = (str, int, bool)


def check_labels(name: str, kind: str, labels: Sequence[Any]) -> None:
    """Multiclass / binary labels are single values; multilabel labels are lists of them;
    a label is valid Unicode text, a finite number or a boolean; a string and a number
    that read the same are not both labels."""
    judged = kind_of(kind)
    passed: set[tuple[type, Any]] = set()  # text and integer labels already judged
    for i, label in enumerate(labels):
        key = (type(label), label) if type(label) in _REPEATED else None
        if key is not None:
            if key in passed:  # the same value passes the same checks again
                continue
            passed.add(key)
        for value in label if isinstance(label, LABEL_SETS) else [label]:
            # text and numbers are judged as every label is; other types get the
            # kind's own message
            if isinstance(value, np.floating):
                value = float(value)
            problem = label_problem(value) if isinstance(value, str | float) else None
            if problem is not None:
                raise DataError(f"head {name!r}: label #{i} {problem}")
        judged.check_label(name, i, label)
    _check_one_spelling(name, labels)


def _check_one_spelling(name: str, labels: Sequence[Any]) -> None:
    """Refuse a string and a number that read the same (``1`` and ``"1"``): they would
    be two classes that every answer prints alike."""
    seen: dict[str, tuple[Any, int]] = {}
    passed: set[tuple[type, Any]] = set()
    for i, label in enumerate(labels):
        key = (type(label), label) if type(label) in _REPEATED else None
        if key is not None:
            if key in passed:
                continue
            passed.add(key)
        for value in label if isinstance(label, LABEL_SETS) else [label]:
            first, at = seen.setdefault(str(value), (value, i))
            if isinstance(first, str) != isinstance(value, str):
                raise DataError(
                    f"head {name!r}: label #{at} is {first!r} and label #{i} is {value!r}: "
                    "a string and a number that read the same would be two classes; "
                    "give every label as the same type"
                )
