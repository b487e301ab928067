"""Metrics for heads: accuracy, macro / micro F1, per-label F1, expected calibration error."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from ..heads.calibration import expected_calibration_error


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
    if kind == "multilabel":
        ece = expected_calibration_error(
            np.maximum(proba, 1 - proba), (proba >= 0.5) == (y_true > 0)
        )
        return {
            "n": n,
            "accuracy": float(accuracy_score(y_true, y_pred)),
            "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
            "micro_f1": float(f1_score(y_true, y_pred, average="micro", zero_division=0)),
            "ece": ece,
        }
    # a target of -1 (unseen in training) stays in both averages: an error like any other
    present = np.unique(np.concatenate([y_true, y_pred]))
    conf = proba.max(axis=1)
    return {
        "n": n,
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(
            f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0)
        ),
        "micro_f1": float(
            f1_score(y_true, y_pred, labels=present, average="micro", zero_division=0)
        ),
        "ece": expected_calibration_error(conf, np.argmax(proba, axis=1) == y_true),
    }


def per_label_f1(kind: str, y_true: np.ndarray, y_pred: np.ndarray, labels: list[Any]) -> dict:
    """F1 of each label (multiclass: one-vs-rest over class indices)."""
    if kind == "multilabel":
        scores = f1_score(y_true, y_pred, average=None, zero_division=0)
    else:
        scores = f1_score(
            y_true, y_pred, labels=np.arange(len(labels)), average=None, zero_division=0
        )
    return {str(lab): float(s) for lab, s in zip(labels, scores, strict=True)}
