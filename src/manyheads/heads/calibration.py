"""Temperature scaling and threshold tuning on validation logits."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit

from .kinds import kind_of
from .thresholds import THRESHOLD_OBJECTIVES, tune_binary_threshold, tune_thresholds

__all__ = [
    "THRESHOLD_OBJECTIVES",
    "calibrated_nll",
    "calibrated_row_nll",
    "expected_calibration_error",
    "fit_temperature",
    "sigmoid",
    "tune_binary_threshold",
    "tune_thresholds",
]

_LOG_T_BOUNDS = (-4.0, 4.0)  # temperatures between ~0.02 and ~55


def _nll_function(logits: np.ndarray, y: np.ndarray, kind: str):  # type: ignore[no-untyped-def]
    return kind_of(kind).nll(logits, y)


def calibrated_nll(logits: np.ndarray, y: np.ndarray, kind: str) -> tuple[float, float]:
    """``(temperature, validation log-loss at that temperature)``."""
    temperature = fit_temperature(logits, y, kind)
    return temperature, _nll_function(logits, y, kind)(float(np.log(temperature)))


def calibrated_row_nll(logits: np.ndarray, y: np.ndarray, kind: str) -> np.ndarray:
    """Each validation row's log-loss at the temperature fitted on all of them."""
    temperature = fit_temperature(logits, y, kind)
    return kind_of(kind).row_nll(logits, y)(float(np.log(temperature)))


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
