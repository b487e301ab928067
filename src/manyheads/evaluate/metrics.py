"""Metrics for heads: accuracy, macro / micro F1, per-label F1, expected calibration error."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from ..heads.calibration import expected_calibration_error
from ..heads.kinds import kind_of, node_depths


def head_metrics(
    kind: str, y_true: np.ndarray, y_pred: np.ndarray, proba: np.ndarray
) -> dict[str, Any]:
    """Metrics of one head on one labelled set.

    ``multiclass`` / ``binary``: ``y_true`` / ``y_pred`` are class indices and
    ``proba`` is ``(n, K)``; ECE is on the top-label confidence.
    ``multilabel``: ``y_true`` / ``y_pred`` are 0/1 matrices and ``proba`` the
    per-label probabilities; accuracy is exact-match accuracy, F1s are over
    labels, and ECE treats every (text, label) pair as one binary prediction.
    """
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    n = int(y_true.shape[0])
    if n == 0:
        return {"n": 0}
    found = kind_of(kind)
    # a single label's target of -1 (unseen in training) stays in both averages: an
    # error like any other
    present = found.scored_labels(y_true, y_pred)
    return {
        "n": n,
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(
            f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0)
        ),
        "micro_f1": float(
            f1_score(y_true, y_pred, labels=present, average="micro", zero_division=0)
        ),
        "ece": expected_calibration_error(*found.calibration_pairs(proba, y_true)),
    }


def per_label_f1(kind: str, y_true: np.ndarray, y_pred: np.ndarray, labels: list[Any]) -> dict:
    """F1 of each label (multiclass: one-vs-rest over class indices)."""
    columns = kind_of(kind).label_columns(len(labels))
    scores = f1_score(y_true, y_pred, labels=columns, average=None, zero_division=0)
    return {str(lab): float(s) for lab, s in zip(labels, scores, strict=True)}


def hierarchical_metrics(
    y_true: np.ndarray, y_pred: np.ndarray, parents: np.ndarray
) -> dict[str, Any]:
    """Hierarchical precision, recall and F1 (each text's true and answered label sets
    taken with every ancestor, then counted over all texts, as in Kiritchenko et al.),
    the F1 of each level (depth 1 = the roots) and the answers that hold a label
    without its parent (``inconsistent``). ``y_true`` / ``y_pred``: 0/1 matrices over
    every node; ``parents``: each node's parent index (-1: a root)."""
    truth = _with_ancestors(np.asarray(y_true) > 0, parents)
    picked = np.asarray(y_pred) > 0
    inconsistent = int(
        sum((picked[:, i] & ~picked[:, p]).sum() for i, p in enumerate(parents) if p >= 0)
    )
    answered = _with_ancestors(picked, parents)
    hit = int((truth & answered).sum())
    precision = hit / max(int(answered.sum()), 1)
    recall = hit / max(int(truth.sum()), 1)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    depth = node_depths(parents)
    levels = {}
    for level in range(1, int(depth.max()) + 1 if len(depth) else 1):
        cols = depth == level  # micro F1 over the level's labels
        t, a = truth[:, cols], answered[:, cols]
        total = int(t.sum() + a.sum())
        levels[str(level)] = 2 * int((t & a).sum()) / total if total else 0.0
    return {
        "hierarchical_precision": precision,
        "hierarchical_recall": recall,
        "hierarchical_f1": f1,
        "f1_per_level": levels,
        "inconsistent": inconsistent,
    }


def _with_ancestors(sets: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Each row's labels and every ancestor of them."""
    out = sets.copy()
    for i in np.argsort(-node_depths(parents), kind="stable"):  # deepest first
        if parents[i] >= 0:
            out[:, parents[i]] |= out[:, i]
    return out
