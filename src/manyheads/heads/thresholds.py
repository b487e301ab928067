"""Thresholds tuned on validation probabilities: one per label (a set's) or one on the
positive class (binary). Needs numpy only."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["THRESHOLD_OBJECTIVES", "tune_binary_threshold", "tune_thresholds"]

_GRID = np.round(np.arange(0.05, 0.951, 0.025), 4)


THRESHOLD_OBJECTIVES = ("f1", "f0.5", "accuracy")
# the weight of recall against precision in each F objective (F-beta)
_BETA = {"f1": 1.0, "f0.5": 0.5}


def tune_thresholds(proba: np.ndarray, y: np.ndarray, objective: str = "f1") -> np.ndarray:
    """Per-label threshold maximising that label's F1 (or F0.5, or accuracy) on
    validation data.

    ``"f1"`` suits tagging (recall on rare labels); ``"f0.5"`` weighs precision
    twice as much as recall, for labels whose false alarms cost more than their
    misses (a secret flagged on ordinary text); ``"accuracy"`` maximises each
    label's accuracy and so favours exact-match accuracy. Labels with no positive
    validation example keep 0.5. Ties go to the threshold closest to 0.5.
    """
    p = np.asarray(proba, dtype=np.float32)
    t = np.asarray(y, dtype=bool)
    n_labels = p.shape[1]
    best = np.full(n_labels, 0.5, dtype=np.float32)
    if p.shape[0] == 0:
        return best
    f1 = np.zeros((n_labels, len(_GRID)), dtype=np.float64)
    for g, thr in enumerate(_GRID):
        pred = p >= thr
        tp = (pred & t).sum(0)
        fp = (pred & ~t).sum(0)
        fn = (~pred & t).sum(0)
        if objective == "accuracy":
            f1[:, g] = 1.0 - (fp + fn) / p.shape[0]
        else:
            f1[:, g] = _f_beta(tp, fp, fn, _BETA[objective])
    closeness = -np.abs(_GRID - 0.5) * 1e-6  # tie-break towards 0.5
    choice = np.argmax(f1 + closeness, axis=1)
    has_pos = t.any(0)
    best[has_pos] = _GRID[choice[has_pos]]
    return best


def tune_binary_threshold(proba: np.ndarray, y: np.ndarray, objective: str = "f1") -> float:
    """Threshold on P(positive) maximising macro-F1 (or F0.5) over both classes, or
    accuracy."""
    p = np.asarray(proba, dtype=np.float32).ravel()
    t = np.asarray(y, dtype=bool).ravel()
    if p.size == 0 or t.all() or not t.any():
        return 0.5
    scores = []
    for thr in _GRID:
        pred = p >= thr
        if objective == "accuracy":
            score = float((pred == t).mean())
        else:
            beta = _BETA[objective]
            score = (_f1(pred, t, beta) + _f1(~pred, ~t, beta)) / 2
        scores.append(score - abs(thr - 0.5) * 1e-6)
    return float(_GRID[int(np.argmax(scores))])


def _f1(pred: np.ndarray, truth: np.ndarray, beta: float = 1.0) -> float:
    tp = (pred & truth).sum()
    return float(_f_beta(tp, (pred & ~truth).sum(), (~pred & truth).sum(), beta))


def _f_beta(tp: Any, fp: Any, fn: Any, beta: float) -> Any:
    """F-beta from counts (arrays or numbers): 0 where there is nothing to count."""
    b2 = beta * beta
    denom = (1 + b2) * tp + b2 * fn + fp
    return np.where(denom > 0, (1 + b2) * tp / np.maximum(denom, 1e-12), 0.0)
