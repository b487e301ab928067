"""From probabilities to answers, the one way: which label (or labels) a head picks,
and the answer it gives (``{label, score, scores}``, multilabel ``{labels, scores}``).
Needs numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from .kind import sigmoid, softmax
from .kinds import kind_of

__all__ = [
    "SCORES",
    "activate",
    "answers",
    "check_scores",
    "decide",
    "sigmoid",
    "softmax",
]

SCORES = ("all", "top", "none")
TOP_SCORES = 5
Scores = str | int
"""Which class scores an answer keeps: ``all``, ``top`` (the best five), ``none``, or
a count (the best that many)."""


def activate(kind: str, z: np.ndarray) -> np.ndarray:
    """Probabilities from temperature-scaled logits: softmax, or sigmoid per output;
    binary heads give two columns ``[1 - p, p]``."""
    return kind_of(kind).activate(z)


def decide(
    kind: str,
    proba: np.ndarray,
    thresholds: np.ndarray | None,
    parents: np.ndarray | None = None,
) -> np.ndarray:
    """The pick of each row: the class index (multiclass: the most probable; binary: 1
    when the positive class reaches its threshold) or, multilabel, a 0/1 row of the
    labels whose probability reaches their thresholds. Hierarchical (``parents``: each
    label's parent index, -1 for a root): top-down, a label is picked when it reaches
    its threshold and its parent is picked, so no child comes without its parent."""
    return kind_of(kind).decide(proba, thresholds, parents)


def answers(
    kind: str,
    labels: Sequence[Any],
    thresholds: np.ndarray | None,
    proba: np.ndarray,
    scores: Scores = "all",
    parents: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """One head's answers from its probabilities (the shape ``Bundle.predict`` documents);
    ``scores``: every class's score (``all``), the best five, highest first (``top``;
    ties in label order), the best ``k`` (a count), or none (``none``). A tree head's
    probabilities are a sparse matrix of each text's best labels
    (:mod:`~manyheads.heads.tree`): ``all`` then keeps its best five."""
    if sp.issparse(proba):
        return _best_answers(kind, labels, thresholds, proba, scores)
    rounded = np.round(proba.astype(np.float64), 6)
    picked = decide(kind, proba, thresholds, parents)
    # only what an answer keeps becomes Python objects (a big label set costs no more)
    if scores == "all":
        kept: list[dict[Any, float]] = [
            dict(zip(labels, ps, strict=True)) for ps in rounded.tolist()
        ]
    elif scores != "none":
        order = np.argsort(-rounded, axis=1, kind="stable")[:, : _top(scores)]
        values = np.take_along_axis(rounded, order, axis=1).tolist()
        kept = [
            {labels[j]: v for j, v in zip(best, vs, strict=True)}
            for best, vs in zip(order.tolist(), values, strict=True)
        ]
    out = kind_of(kind).answers(labels, picked, rounded)
    if scores != "none":
        for answer, one in zip(out, kept, strict=True):
            answer["scores"] = one
    return out


def _top(scores: Scores) -> int:
    return scores if isinstance(scores, int) else TOP_SCORES


def _best_answers(
    kind: str,
    labels: Sequence[Any],
    thresholds: np.ndarray | None,
    proba: Any,
    scores: Scores,
) -> list[dict[str, Any]]:
    """Answers from each row's best labels (a sparse matrix: a tree head's): the most
    probable label (multiclass) or those reaching the head's threshold (multilabel),
    best first."""
    proba = sp.csr_matrix(proba)
    exclusive = kind_of(kind).exclusive
    k = _top(scores)
    bounds = proba.indptr.tolist()
    row = np.repeat(np.arange(proba.shape[0]), np.diff(proba.indptr))
    rounded = np.round(proba.data.astype(np.float64), 6)
    order = np.lexsort((proba.indices, -rounded, row))  # by row, each best first
    cols, ps = proba.indices[order], rounded[order]
    col_list, p_list = cols.tolist(), ps.tolist()
    chosen = [] if exclusive else (ps >= (0.5 if thresholds is None else thresholds[cols])).tolist()
    out: list[dict[str, Any]] = []
    for lo, hi in pairwise(bounds):
        if exclusive:
            answer: dict[str, Any] = (
                {"label": labels[col_list[lo]], "score": p_list[lo]}
                if hi > lo
                else {"label": None, "score": None}
            )
        else:
            picked = zip(col_list[lo:hi], chosen[lo:hi], strict=True)
            answer = {"labels": [labels[j] for j, yes in picked if yes]}
        if scores != "none":
            top = min(hi, lo + k)
            answer["scores"] = {
                labels[j]: p for j, p in zip(col_list[lo:top], p_list[lo:top], strict=True)
            }
        out.append(answer)
    return out


def check_scores(scores: Any) -> Scores:
    """Refuse (one line) a ``scores`` choice other than all, top, none and a count."""
    if isinstance(scores, int) and not isinstance(scores, bool):
        if scores < 1:
            raise ConfigError(
                f"{{top_k}} must be a positive integer, got {scores!r}", options=("top_k",)
            )
        return int(scores)
    if scores not in SCORES:
        raise ConfigError(f"scores must be one of {', '.join(SCORES)}, got {scores!r}")
    return str(scores)
