"""Labels as training targets, the one way every trained part reads them: linear and
MLP heads, the byte trunk's training heads and fine-tuning's task heads.

Classes are the distinct labels, sorted; multiclass and binary targets are class
indices, multilabel targets a 0/1 matrix (a column per label). A hierarchical head's
classes are every node of its label paths, and a text's row marks each path with all
its ancestors. A label of
``None`` (where allowed) means "this text is not labelled for this task": its
row is absent. Labels a head never saw in training are dropped in one place
(:func:`known_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from .kinds import PATH_SEP, SET_KINDS, expand_paths, label_sets

__all__ = ["Targets", "encode_targets", "known_rows", "learn_targets"]

ABSENT = -100  # the class index of a row without a label (torch's ignore_index)


@dataclass(frozen=True)
class Targets:
    """``y``: class indices (int64; ``ABSENT`` where a row has no label) or a 0/1 matrix
    (float32; an unlabelled row is all 0); ``present``: the rows that have a label."""

    kind: str
    classes: list[Any]
    y: np.ndarray
    present: np.ndarray


def _sorted(values: set[Any], where: str) -> list[Any]:
    try:
        return sorted(values)
    except TypeError as exc:
        raise DataError(f"{where}labels must be of one comparable type ({exc})") from None


def _sets(
    kind: str, labels: list[Any], present: np.ndarray, path_sep: str, where: str
) -> list[list[Any]]:
    """A set kind's labels as one list per text (hierarchical: the paths' every node)."""
    try:
        sets = label_sets([v if p else [] for v, p in zip(labels, present, strict=True)])
        if kind == "hierarchical":
            sets = [expand_paths(labs, path_sep) for labs in sets]
    except DataError as exc:
        raise DataError(f"{where}{exc}") from None
    return sets


def learn_targets(
    kind: str,
    labels: Sequence[Any],
    *,
    where: str = "",
    missing: bool = False,
    path_sep: str = PATH_SEP,
) -> Targets:
    """The classes of ``labels`` and their targets. ``missing``: a ``None`` label marks
    a row without a label (else it is a label like any). ``where`` prefixes messages
    (``"task 'topic': "``). ``path_sep``: what separates a hierarchical label's parts."""
    labels = list(labels)
    present = np.array([not (missing and v is None) for v in labels], dtype=bool)
    if not present.any():
        raise DataError(f"{where}no text has a label")
    if kind in SET_KINDS:
        sets = _sets(kind, labels, present, path_sep, where)
        classes = _sorted({v for labs in sets for v in labs}, where)
        if not classes:
            raise DataError(f"{where}{kind} targets contain no label at all")
    else:
        classes = _sorted({v for v, p in zip(labels, present, strict=True) if p}, where)
        if len(classes) < 2:
            only = classes[0] if classes else None
            raise DataError(
                f"{where}labels have a single class ({only!r}); a classifier needs at least two"
            )
        if kind == "binary" and len(classes) != 2:
            raise DataError(
                f"{where}a binary head needs exactly 2 classes, got {len(classes)}: {classes[:10]}"
            )
    return encode_targets(kind, labels, classes, present=present, where=where, path_sep=path_sep)


def encode_targets(
    kind: str,
    labels: Sequence[Any],
    classes: Sequence[Any],
    *,
    present: np.ndarray | None = None,
    where: str = "",
    path_sep: str = PATH_SEP,
) -> Targets:
    """Targets of ``labels`` against known ``classes`` (a multilabel label outside them
    is left out; a single label outside them is an error: see :func:`known_rows`)."""
    labels = list(labels)
    if present is None:
        present = np.ones(len(labels), dtype=bool)
    index = {c: i for i, c in enumerate(classes)}
    if kind in SET_KINDS:
        sets = _sets(kind, labels, present, path_sep, where)
        y = np.zeros((len(sets), len(index)), dtype=np.float32)
        for i, labs in enumerate(sets):
            y[i, [index[v] for v in labs if v in index]] = 1.0
        return Targets(kind, list(classes), y, present)
    idx = np.full(len(labels), ABSENT, dtype=np.int64)
    for i, (v, p) in enumerate(zip(labels, present, strict=True)):
        if p:
            k = index.get(v)
            if k is None:
                raise DataError(f"{where}label {v!r} was not seen in training")
            idx[i] = k
    return Targets(kind, list(classes), idx, present)


def known_rows(kind: str, labels: Sequence[Any], classes: Sequence[Any]) -> tuple[list[int], list]:
    """``(rows, labels)`` without what a head fitted on ``classes`` never saw: the rows
    whose single label is unseen go; a multilabel row keeps its known labels."""
    known = set(classes)
    if kind in SET_KINDS:
        return list(range(len(labels))), [[v for v in labs if v in known] for labs in labels]
    rows = [i for i, v in enumerate(labels) if v in known]
    return rows, [labels[i] for i in rows]
