"""Temperature scaling and threshold tuning on validation logits."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, log_expit, log_softmax

_LOG_T_BOUNDS = (-4.0, 4.0)  # temperatures between ~0.02 and ~55


def _nll_function(logits: np.ndarray, y: np.ndarray, kind: str):  # type: ignore[no-untyped-def]
    z = np.asarray(logits, dtype=np.float64)
    if kind == "multiclass":
        idx = np.asarray(y, dtype=np.int64)
        rows = np.arange(len(idx))

        def nll(log_t: float) -> float:
            return float(-log_softmax(z / np.exp(log_t), axis=1)[rows, idx].mean())

    else:
        t = np.asarray(y, dtype=np.float64).reshape(z.shape)

        def nll(log_t: float) -> float:
            s = z / np.exp(log_t)
            return float(-(t * log_expit(s) + (1 - t) * log_expit(-s)).mean())

    return nll


def calibrated_nll(logits: np.ndarray, y: np.ndarray, kind: str) -> tuple[float, float]:
    """``(temperature, validation log-loss at that temperature)``."""
    temperature = fit_temperature(logits, y, kind)
    return temperature, _nll_function(logits, y, kind)(float(np.log(temperature)))


def fit_temperature(logits: np.ndarray, y: np.ndarray, kind: str) -> float:
    """Scalar temperature minimising the validation negative log-likelihood.

    ``multiclass``: ``y`` holds class indices and ``logits`` is ``(n, K)``.
    ``binary`` / ``multilabel``: ``y`` is a 0/1 matrix shaped like ``logits``.
    """
    if np.asarray(logits).shape[0] == 0:
        return 1.0
    nll = _nll_function(logits, y, kind)
    res = minimize_scalar(nll, bounds=_LOG_T_BOUNDS, method="bounded", options={"xatol": 1e-4})
    return float(np.exp(res.x))


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


def sigmoid(z: np.ndarray) -> np.ndarray:
    return expit(z)


def expected_calibration_error(
    confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15
) -> float:
    """ECE with equal-width confidence bins: sum over bins of |accuracy - confidence| * share."""
    conf = np.asarray(confidence, dtype=np.float64).ravel()
    hit = np.asarray(correct, dtype=np.float64).ravel()
    if conf.size == 0:
        return 0.0
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    conf_sum = np.bincount(bins, weights=conf, minlength=n_bins)
    hit_sum = np.bincount(bins, weights=hit, minlength=n_bins)
    return float(np.abs(hit_sum - conf_sum).sum() / conf.size)
