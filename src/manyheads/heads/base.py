"""What every head shares: turning logits into probabilities, labels and answers."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import expit, softmax
from sklearn.base import BaseEstimator, ClassifierMixin

from ..errors import ConfigError
from .calibration import (
    THRESHOLD_OBJECTIVES,
    fit_temperature,
    tune_binary_threshold,
    tune_thresholds,
)


class HeadBase(ClassifierMixin, BaseEstimator):
    """Prediction methods shared by :class:`LinearHead` and :class:`MLPHead`.

    A subclass provides ``decision_function(X, raw=False)`` (temperature-scaled
    logits; binary heads give one column, flattened) and the learned
    ``kind``, ``classes_`` and ``thresholds_``.
    """

    kind: str
    calibrate: bool
    thresholds: str
    classes_: np.ndarray
    temperature_: float
    thresholds_: np.ndarray

    def _check_thresholds(self) -> None:
        if self.thresholds not in THRESHOLD_OBJECTIVES:
            raise ConfigError(
                f"thresholds must be one of {', '.join(THRESHOLD_OBJECTIVES)}, "
                f"got {self.thresholds!r}"
            )

    def _calibrate(self, X_val: Any, target: np.ndarray) -> Any:
        """Temperature (if ``calibrate``) and binary / multilabel thresholds from
        validation rows and their encoded targets."""
        if len(target) == 0:
            return self
        z = self.decision_function(X_val, raw=True)
        if self.calibrate:
            self.temperature_ = fit_temperature(z, target, self.kind)
        if self.kind == "multilabel":
            self.thresholds_ = tune_thresholds(
                expit(z / self.temperature_), target, self.thresholds
            )
        elif self.kind == "binary":
            p = expit(z / self.temperature_)
            self.thresholds_ = np.array(
                [tune_binary_threshold(p, target, self.thresholds)], dtype=np.float32
            )
        return self

    def decision_function(self, X: Any, *, raw: bool = False) -> np.ndarray:
        raise NotImplementedError

    def predict_proba(self, X: Any) -> np.ndarray:
        """Multiclass: softmax (n x K). Binary: (n x 2). Multilabel: per-label sigmoid (n x L)."""
        return self.proba_from_logits(self.decision_function(X))

    def proba_from_logits(self, z: np.ndarray) -> np.ndarray:
        """Probabilities from temperature-scaled logits."""
        if self.kind == "multiclass":
            return softmax(z, axis=1)
        p = expit(z)
        if self.kind == "binary":
            p = p.reshape(-1)
            return np.stack([1 - p, p], axis=1)
        return p

    def predict(self, X: Any) -> np.ndarray:
        """Labels (multiclass / binary) or a 0/1 indicator matrix (multilabel)."""
        return self.predict_from_proba(self.predict_proba(X))

    def predict_from_proba(self, proba: np.ndarray) -> np.ndarray:
        if self.kind == "multiclass":
            return self.classes_[np.argmax(proba, axis=1)]
        if self.kind == "binary":
            return self.classes_[(proba[:, 1] >= self.thresholds_[0]).astype(int)]
        return (proba >= self.thresholds_).astype(np.int64)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        if self.kind == "multilabel":
            tags.target_tags.multi_output = True
        return tags
