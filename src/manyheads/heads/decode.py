"""From probabilities to answers, the one way: which label (or labels) a head picks,
and the answer it gives (``{label, score, scores}``, multilabel ``{labels, scores}``).
Needs numpy only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = [
    "SCORES",
    "activate",
    "answers",
    "check_scores",
    "decide",
    "sigmoid",
    "softmax",
    "trim_scores",
]

SCORES = ("all", "top", "none")
TOP_SCORES = 5


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow warnings."""
    return np.exp(-np.logaddexp(0, -z))


def activate(kind: str, z: np.ndarray) -> np.ndarray:
    """Probabilities from temperature-scaled logits: softmax, or sigmoid per output;
    binary heads give two columns ``[1 - p, p]``."""
    if kind == "multiclass":
        return softmax(z)
    p = sigmoid(z)
    if kind == "binary":
        p = p[:, 0]
        return np.stack([1 - p, p], axis=1)
    return p


def decide(kind: str, proba: np.ndarray, thresholds: np.ndarray | None) -> np.ndarray:
    """The pick of each row: the class index (multiclass: the most probable; binary: 1
    when the positive class reaches its threshold) or, multilabel, a 0/1 row of the
    labels whose probability reaches their thresholds."""
    if kind == "multilabel":
        return (proba >= thresholds).astype(np.int64)
    if kind == "binary":
        assert thresholds is not None
        return (proba[:, 1] >= thresholds[0]).astype(np.int64)
    return np.argmax(proba, axis=1)


def answers(
    kind: str, labels: Sequence[Any], thresholds: np.ndarray | None, proba: np.ndarray
) -> list[dict[str, Any]]:
    """One head's answers from its probabilities (the shape ``Bundle.predict`` documents)."""
    rounded = np.round(proba.astype(np.float64), 6).tolist()
    picked = decide(kind, proba, thresholds).tolist()
    if kind == "multilabel":
        return [
            {
                "labels": [lab for lab, hit in zip(labels, hits, strict=True) if hit],
                "scores": dict(zip(labels, ps, strict=True)),
            }
            for hits, ps in zip(picked, rounded, strict=True)
        ]
    return [
        {"label": labels[k], "score": ps[k], "scores": dict(zip(labels, ps, strict=True))}
        for k, ps in zip(picked, rounded, strict=True)
    ]


def check_scores(scores: Any) -> str:
    """Refuse (one line) a ``scores`` choice other than all, top and none."""
    if scores not in SCORES:
        raise ConfigError(f"scores must be one of {', '.join(SCORES)}, got {scores!r}")
    return str(scores)


def trim_scores(answer: Mapping[str, Any], scores: str) -> dict[str, Any]:
    """One text's answers (``{head: answer}``) with their ``scores`` kept whole (``all``),
    cut to the best five classes, highest first (``top``), or left out (``none``; a
    single-label head keeps its ``score``)."""
    check_scores(scores)
    if scores == "all":
        return dict(answer)
    out: dict[str, Any] = {}
    for name, one in answer.items():
        kept = {k: v for k, v in one.items() if k != "scores"}
        if scores == "top":
            best = sorted(one.get("scores", {}).items(), key=lambda kv: -kv[1])
            kept["scores"] = dict(best[:TOP_SCORES])
        out[name] = kept
    return out
