"""What every head shares: turning logits into probabilities, labels and answers."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import expit, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import DataConversionWarning, NotFittedError
from sklearn.utils.validation import check_array

from ..errors import DataError
from .calibration import fit_temperature
from .kinds import KINDS, Kind, check_kind, kind_of, label_problem
from .record import CheckedRecord
from .settings import HEAD_RULES
from .targets import encode_targets, known_rows, learn_targets


def _softmax_rows(z: np.ndarray) -> np.ndarray:
    return softmax(z, axis=1)


class HeadBase(ClassifierMixin, BaseEstimator):
    """Prediction methods shared by :class:`LinearHead` and :class:`MLPHead`.

    A subclass provides ``decision_function(X, raw=False)`` (temperature-scaled
    logits; binary heads give one column, flattened) and the learned
    ``kind``, ``classes_`` and ``thresholds_``.
    """

    kind: str
    path_sep: str
    calibrate: bool
    thresholds: str
    class_weight: Any
    classes_: np.ndarray
    n_features_in_: int
    temperature_: float
    thresholds_: np.ndarray

    @property
    def head_kind(self) -> Kind:
        """The :class:`~manyheads.heads.kind.Kind` named by ``kind``."""
        return kind_of(self.kind)

    @property
    def fitted(self) -> bool:
        """Whether the head is fitted (it has weights and a temperature)."""
        return hasattr(self, "n_features_in_") and hasattr(self, "temperature_")

    def _check_common(self) -> None:
        """The settings every head has: kind, thresholds objective, class weights."""
        HEAD_RULES["thresholds"].check("thresholds", self.thresholds)
        check_kind(self.kind).check_path_sep(self.path_sep)
        HEAD_RULES["class_weight"].check("class_weight", self.class_weight)

    def _fit_start(
        self, X: Any, y: Any, classes: Sequence[Any] | None = None
    ) -> tuple[Any, np.ndarray]:
        """The settings checked, ``X`` checked (dense or CSR) and the targets of ``y``
        (``classes_`` learnt, or ``classes`` when given): what every ``fit`` starts
        with."""
        self.check_params()
        X = check_array(X, accept_sparse="csr", dtype=(np.float32, np.float64))
        if y is None:
            raise DataError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        if not hasattr(y, "__len__") and hasattr(y, "__array__"):
            y = np.asarray(y)  # an array-like without a length (it converts to an array)
        if len(y) != X.shape[0]:
            raise DataError(f"X has {X.shape[0]} rows but y has {len(y)} labels")
        target = self._learn_targets(y, classes)
        if X.shape[0] == 0:
            raise DataError("no training rows")
        return X, target

    def check_params(self) -> None:
        raise NotImplementedError

    @property
    def parents_(self) -> np.ndarray | None:
        """A hierarchical head's parent of each label (an index, -1 for a root)."""
        return self.head_kind.parents(self.classes_.tolist(), self.path_sep)

    @property
    def n_outputs_(self) -> int:
        """Outputs of the head's last layer: 1 for binary, else one per class / label."""
        if not self.fitted:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet")
        return self.head_kind.n_outputs(len(self.classes_))

    def _record_fields(self) -> dict[str, Any]:
        """The fields of the head's stored record every type has."""
        kind = self.head_kind
        stored = kind.stored_thresholds(len(self.classes_)) is not None
        return {"kind": self.kind, **kind.record_fields(self.path_sep)} | {
            "labels": self.classes_.tolist(),
            "temperature": float(self.temperature_),
            "thresholds": [float(t) for t in self.thresholds_.tolist()] if stored else None,
        }

    def _restore(self, checked: CheckedRecord) -> None:
        """Labels, temperature and thresholds from a checked stored record."""
        self.classes_ = np.asarray(checked.labels)
        self._fit_indicator = False
        if checked.path_sep is not None:
            self.path_sep = checked.path_sep
        self.temperature_ = checked.temperature
        n_thr = self.head_kind.n_thresholds(len(checked.labels))
        thresholds = checked.thresholds
        self.thresholds_ = (
            np.full(n_thr, 0.5, dtype=np.float32) if thresholds is None else thresholds.copy()
        )

    # -- targets (heads.targets, the one encoding of labels) -------------------

    def _learn_targets(self, y: Any, classes: Sequence[Any] | None = None) -> np.ndarray:
        """Learn ``classes_`` from ``y`` (or take ``classes``); return class indices or the
        0/1 float32 matrix (a multilabel head also takes a 0/1 indicator matrix: its
        columns are the classes)."""
        kind = self.head_kind
        if kind.indicator_targets and isinstance(y, np.ndarray) and y.ndim == 2:
            self._fit_indicator = True
            self.classes_ = np.arange(y.shape[1])
            if y.shape[1] == 0:
                raise DataError("multilabel targets contain no label at all")
            return (y != 0).astype(np.float32)
        self._fit_indicator = False
        if not kind.is_set:
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1:
                warnings.warn(
                    "A column-vector y was passed when a 1d array was expected. Please "
                    "change the shape of y to (n_samples, ), for example using ravel().",
                    DataConversionWarning,
                    stacklevel=3,
                )
                y = y.ravel()
            if y.ndim != 1:
                raise DataError(f"{self.kind} targets must be one label per row")
            y = y.tolist()
            for i, value in enumerate(y):
                if isinstance(value, float) and not math.isfinite(value):
                    raise DataError(f"label #{i} {label_problem(value)}")
        if classes is not None:
            targets = encode_targets(self.kind, y, list(classes), path_sep=self.path_sep)
        else:
            targets = learn_targets(self.kind, y, path_sep=self.path_sep)
        self.classes_ = np.asarray(targets.classes)
        return targets.y

    def _encode_targets(self, y: Any) -> np.ndarray:
        """Targets of ``y`` against the learnt ``classes_`` (multilabel: unseen labels left
        out; a single unseen label is an error)."""
        kind = self.head_kind
        if kind.indicator_targets and getattr(self, "_fit_indicator", False):
            if not (isinstance(y, np.ndarray) and y.ndim == 2):
                raise DataError(
                    "this head was fitted on a 0/1 indicator matrix; "
                    "pass validation targets the same way"
                )
            if y.shape[1] != len(self.classes_):
                raise DataError(
                    f"indicator matrix has {y.shape[1]} columns, expected {len(self.classes_)}"
                )
            return (y != 0).astype(np.float32)
        labels = y if kind.is_set else np.asarray(y).tolist()
        return encode_targets(self.kind, labels, self.classes_.tolist(), path_sep=self.path_sep).y

    def _known_validation(self, X_val: Any, y_val: Any) -> tuple[Any, np.ndarray]:
        """Validation rows and encoded targets, without what the training data lacked
        (:func:`~manyheads.heads.targets.known_rows`)."""
        if X_val.shape[0] != len(y_val):
            raise DataError(f"X_val has {X_val.shape[0]} rows but y_val has {len(y_val)} labels")
        if self.head_kind.is_set:  # unseen labels are left out of a set's targets
            return X_val, self._encode_targets(y_val)
        rows, labels = known_rows(self.kind, np.asarray(y_val).tolist(), self.classes_.tolist())
        return X_val[rows], self._encode_targets(labels)

    def _calibrate(self, X_val: Any, target: np.ndarray) -> Any:
        """Temperature (if ``calibrate``) and binary / multilabel thresholds from
        validation rows and their encoded targets."""
        if len(target) == 0:
            return self
        z = self.decision_function(X_val, raw=True)
        if self.calibrate:
            self.temperature_ = fit_temperature(z, target, self.kind)
        tuned = self.head_kind.tune_thresholds(
            expit(z / self.temperature_), target, self.thresholds
        )
        if tuned is not None:
            self.thresholds_ = tuned
        return self

    def decision_function(self, X: Any, *, raw: bool = False) -> np.ndarray:
        """Logits divided by the temperature (``raw=True``: before it); a binary head's one
        column flattened."""
        if not self.fitted:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet")
        X = check_array(X, accept_sparse="csr", dtype=(np.float32, np.float64))
        if X.shape[1] != self.n_features_in_:
            raise DataError(
                f"X has {X.shape[1]} features but the head was fitted on {self.n_features_in_}"
            )
        z = self.head_kind.flat_logits(self._logits(X))
        return z if raw else z / np.float32(self.temperature_)

    def _logits(self, X: Any) -> np.ndarray:
        """The head's logits before the temperature (one column per output)."""
        raise NotImplementedError

    def predict_proba(self, X: Any) -> np.ndarray:
        """Multiclass: softmax (n x K). Binary: (n x 2). Multilabel: per-label sigmoid (n x L)."""
        return self.proba_from_logits(self.decision_function(X))

    def proba_from_logits(self, z: np.ndarray) -> np.ndarray:
        """Probabilities from temperature-scaled logits."""
        return self.head_kind.activate(z, _softmax_rows, expit)

    def predict(self, X: Any) -> np.ndarray:
        """Labels (multiclass / binary) or a 0/1 indicator matrix (multilabel)."""
        return self.predict_from_proba(self.predict_proba(X))

    def predict_from_proba(self, proba: np.ndarray) -> np.ndarray:
        """Labels (multiclass / binary) or a 0/1 indicator matrix (multilabel): the same
        decision as every answer's (:func:`~manyheads.heads.decode.decide`)."""
        kind = self.head_kind
        return kind.predicted(kind.decide(proba, self.thresholds_, self.parents_), self.classes_)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # fit and predict take CSR matrices
        kind = KINDS.get(self.kind) if isinstance(self.kind, str) else None
        if kind is not None and kind.single_logit:
            tags.classifier_tags.multi_class = False
        if kind is not None and kind.is_set:
            tags.target_tags.multi_output = True
        return tags
