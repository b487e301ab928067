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
from .kind import Reading
from .kinds import ABSENT, PATH_SEP, Kind, kind_of

__all__ = ["ABSENT", "Targets", "encode_targets", "known_rows", "learn_targets"]


@dataclass(frozen=True)
class Targets:
    """``y``: class indices (int64; ``ABSENT`` where a row has no label) or a 0/1 matrix
    (float32; an unlabelled row is all 0); ``present``: the rows that have a label."""

    kind: Kind
    classes: list[Any]
    y: np.ndarray
    present: np.ndarray


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
    classes = kind_of(kind).learn_classes(labels, Reading(present, path_sep, where))
    return encode_targets(kind, labels, classes, present=present, where=where, path_sep=path_sep)


def encode_targets(
    kind: str,
    labels: Sequence[Any],
    classes: Sequence[Any],
    *,
    present: np.ndarray | None = None,
    where: str = "",
    path_sep: str = PATH_SEP,
    unseen: int | None = None,
) -> Targets:
    """Targets of ``labels`` against known ``classes`` (a multilabel label outside them
    is left out; a single label outside them is an error, or the class index
    ``unseen`` when given: see :func:`known_rows`)."""
    labels = list(labels)
    if present is None:
        present = np.ones(len(labels), dtype=bool)
    found = kind_of(kind)
    y = found.encode_labels(labels, classes, Reading(present, path_sep, where, unseen))
    return Targets(found, list(classes), y, present)


def known_rows(kind: str, labels: Sequence[Any], classes: Sequence[Any]) -> tuple[list[int], list]:
    """``(rows, labels)`` without what a head fitted on ``classes`` never saw: the rows
    whose single label is unseen go; a multilabel row keeps its known labels."""
    return kind_of(kind).known_rows(labels, classes)
