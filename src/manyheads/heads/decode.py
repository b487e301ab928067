"""From probabilities to answers, the one way: which label (or labels) a head picks,
and the answer it gives (``{label, score, scores}``, multilabel ``{labels, scores}``).
Needs numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
    scores: str = "all",
    parents: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """One head's answers from its probabilities (the shape ``Bundle.predict`` documents);
    ``scores``: every class's score (``all``), the best five, highest first (``top``;
    ties in label order), or none (``none``)."""
    rounded = np.round(proba.astype(np.float64), 6)
    picked = decide(kind, proba, thresholds, parents)
    # only what an answer keeps becomes Python objects (a big label set costs no more)
    if scores == "all":
        kept: list[dict[Any, float]] = [
            dict(zip(labels, ps, strict=True)) for ps in rounded.tolist()
        ]
    elif scores == "top":
        order = np.argsort(-rounded, axis=1, kind="stable")[:, :TOP_SCORES]
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


def check_scores(scores: Any) -> str:
    """Refuse (one line) a ``scores`` choice other than all, top and none."""
    if scores not in SCORES:
        raise ConfigError(f"scores must be one of {', '.join(SCORES)}, got {scores!r}")
    return str(scores)
