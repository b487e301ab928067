"""Linear heads on trunk embeddings, following the scikit-learn estimator contract."""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.validation import check_array, check_is_fitted
from threadpoolctl import threadpool_limits

from ..errors import ConfigError, DataError
from .base import HeadBase
from .calibration import (
    calibrated_nll,
    calibrated_row_nll,
)
from .kinds import PATH_SEP
from .record import check_record
from .settings import HEAD_RULES
from .solver import LinearSolution, fit_sigmoid, fit_softmax

_C_MIN, _C_MAX = 1.0 / 64, 1024.0
# with a prior, C may fall this low: the penalty then holds the weights at the prior's
# (the head made from label names), which a few rows may not beat
_C_MIN_PRIOR = 1.0 / 4096

__all__ = ["LinearHead", "head_from_record", "head_to_record"]


class LinearHead(HeadBase):
    """A linear classifier on L2-normalised embeddings.

    Parameters
    ----------
    kind : {"multiclass", "binary", "multilabel", "hierarchical"}
        ``multiclass``: one label out of K (softmax). ``binary``: two classes,
        one sigmoid output, ``classes_[1]`` is the positive class.
        ``multilabel``: any subset of L labels (one sigmoid per label).
    C : float or "auto"
        Inverse L2 regularisation strength (as in scikit-learn). ``"auto"``
        picks it on the validation data passed to :meth:`fit`:
        starting at 1 (with ``warm_start``, at the C chosen before), C is multiplied
        (or divided) by 4 while the validation log-loss after temperature scaling
        improves; the path is warm-started.
        Without validation data ``"auto"`` means 1 (or the C chosen before,
        when refitting with ``warm_start``). The chosen value is ``C_``.
    class_weight : None, "balanced" or dict
        Weight classes (multilabel: positives of each label) inversely to
        their frequency, for imbalanced labels.
    calibrate : bool
        Fit a temperature on the validation data passed to :meth:`fit`.
    thresholds : {"f1", "f0.5", "accuracy"}
        What the binary / multilabel decision thresholds maximise on
        validation data: F1 (multilabel: per label; binary: macro-F1), F0.5
        (the same, precision weighing twice as much as recall: fewer false
        alarms), or accuracy (multilabel: per label, which favours exact-match
        accuracy).
    max_iter : int
        L-BFGS iterations.
    tol : float
        L-BFGS stops when the largest gradient component is below ``tol``.
    warm_start : bool
        Start from the previous solution when refitting: the outputs of the labels
        it knew keep their weights, a new label's start at zero (a label gone, or
        other features: a cold start).

    prior : LinearHead, optional
        A fitted head of the same kind (a head made from label names) whose weights
        the L2 penalty pulls towards, instead of towards zero: with few rows the
        head stays near it, with many it becomes an ordinary head. Its labels join
        the head's (a label without rows keeps the prior's weights); the fit starts
        from them. Not part of the stored record.

    Learned attributes: ``classes_``, ``coef_`` (outputs x features),
    ``intercept_``, ``temperature_``, ``thresholds_`` (binary / multilabel),
    ``n_features_in_``, ``n_iter_``.
    """

    classes_: np.ndarray
    C_: float
    coef_: np.ndarray
    intercept_: np.ndarray
    temperature_: float
    thresholds_: np.ndarray
    n_features_in_: int
    n_iter_: int

    def __init__(
        self,
        kind: str = "multiclass",
        C: float | str = 1.0,
        class_weight: str | dict[Any, float] | None = None,
        calibrate: bool = True,
        thresholds: str = "f1",
        max_iter: int = 500,
        tol: float = 1e-4,
        warm_start: bool = False,
        path_sep: str = PATH_SEP,
        prior: LinearHead | None = None,
    ) -> None:
        self.kind, self.C, self.class_weight, self.calibrate = kind, C, class_weight, calibrate
        self.path_sep, self.prior = path_sep, prior
        self.thresholds, self.max_iter, self.tol = thresholds, max_iter, tol
        self.warm_start = warm_start

    # -- fitting -----------------------------------------------------------

    def check_params(self) -> None:
        """Refuse (:class:`ConfigError`, naming the setting) a setting out of its range."""
        self._check_common()
        HEAD_RULES["C"].check("C", self.C)
        if not isinstance(self.max_iter, numbers.Integral) or self.max_iter < 1:
            raise ConfigError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if not isinstance(self.tol, numbers.Real) or not self.tol > 0:
            raise ConfigError(f"tol must be a positive number, got {self.tol!r}")
        prior = self.prior
        if prior is not None and (
            not isinstance(prior, LinearHead)
            or not hasattr(prior, "coef_")
            or prior.kind != self.kind
        ):
            raise ConfigError(f"prior must be a fitted {self.kind} LinearHead, got {prior!r}")

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        X_val: Any = None,
        y_val: Any = None,
        sample_weight: Any = None,
        soft_target: tuple[Sequence[Any], Any] | None = None,
    ) -> LinearHead:
        """Fit on ``X`` (n x d embeddings) and ``y``; calibrate on ``(X_val, y_val)``.

        Without validation data the temperature stays 1 and thresholds 0.5.

        ``soft_target=(labels, P)``: learn from the probabilities ``P`` (n x len(labels),
        a teacher's answers) instead of ``y``: softmax cross-entropy against each row's
        distribution (multiclass), sigmoid cross-entropy against each label's
        probability (binary: the second class's; multilabel). The classes are
        ``labels`` (sorted), whether or not ``y`` holds them; ``y`` (the teacher's
        decisions) and the validation data are what calibration is measured on.
        """
        previous_classes = getattr(self, "classes_", None)
        # learning from a teacher: its labels are the classes, answered or not
        classes = None if soft_target is None else _teacher_classes(soft_target[0])
        X, target = self._fit_start(X, y, classes)
        center = None
        if self.prior is not None and soft_target is None:
            union = _sorted_union(self.prior.classes_.tolist(), self.classes_.tolist())
            if union != self.classes_.tolist():
                target = self._learn_targets(y, union)
            center = self._mapped(self.prior, X.shape[1], fill=0.0)
            if center is None:
                raise DataError("the prior head's features differ from these rows'")
        warm = center
        if self.warm_start and hasattr(self, "coef_") and previous_classes is not None:
            warm = self._carried_start(previous_classes.tolist(), X.shape[1]) or warm
        self.n_features_in_ = X.shape[1]
        sw = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if sw is not None and sw.ndim == 1 and len(sw) == X.shape[0] and not sw.any():
            raise DataError("sample_weight must contain at least one non-zero weight")
        Q = None if soft_target is None else self._soft_columns(*soft_target, rows=X.shape[0])
        kind = self.head_kind
        if kind.is_set:
            Y = target.astype(np.float64)
            pos_weight = self._label_weights(Y)

            def solve(C: float, start: LinearSolution | None) -> LinearSolution:
                return fit_sigmoid(
                    X,
                    Y if Q is None else Q,
                    C=C,
                    sample_weight=sw,
                    pos_weight=pos_weight,
                    warm_start=start,
                    max_iter=int(self.max_iter),
                    tol=float(self.tol),
                    prior=center,
                )
        else:
            idx = target
            if self.class_weight is not None:
                cw = compute_sample_weight(self.class_weight, np.asarray(y))
                sw = cw if sw is None else sw * cw

            def solve(C: float, start: LinearSolution | None) -> LinearSolution:
                if kind.single_logit:  # one sigmoid: the positive class's
                    return fit_sigmoid(
                        X,
                        idx[:, None] if Q is None else Q,
                        C=C,
                        sample_weight=sw,
                        warm_start=start,
                        max_iter=int(self.max_iter),
                        tol=float(self.tol),
                        prior=center,
                    )
                return fit_softmax(
                    X,
                    idx if Q is None else Q,
                    len(self.classes_),
                    C=C,
                    sample_weight=sw,
                    warm_start=start,
                    max_iter=int(self.max_iter),
                    tol=float(self.tol),
                    prior=center,
                )

        has_val = X_val is not None and y_val is not None and len(y_val) > 0
        if self.C == "auto" and has_val:
            self.C_, sol = self._select_C(solve, warm, X_val, y_val)
        else:
            if self.C == "auto":
                C_value = float(getattr(self, "C_", 1.0)) if self.warm_start else 1.0
            else:
                C_value = float(self.C)
            self.C_ = C_value
            sol = solve(C_value, warm)
        self.coef_, self.intercept_, self.n_iter_ = sol.coef, sol.intercept, sol.n_iter
        if warm is None or not hasattr(self, "temperature_"):
            self.temperature_ = 1.0
            n_thr = kind.n_thresholds(len(self.classes_))
            self.thresholds_ = np.full(n_thr, 0.5, dtype=np.float32)
        if has_val:
            self.calibrate_on(X_val, y_val)
        return self

    def _carried_start(self, previous: list[Any], n_features: int) -> LinearSolution | None:
        """The previous solution as a start for the classes now learnt: each output
        the head had keeps its weights; an output for a class it did not know starts at
        zero weights and the lowest intercept (a rare class); an output for a class
        these rows lack is left out (a validation split can hold all of a rare class's
        rows). None when the features changed: a cold start."""
        old = LinearHead(self.kind, path_sep=self.path_sep)
        old.classes_, old.coef_, old.intercept_ = np.asarray(previous), self.coef_, self.intercept_
        kind = self.head_kind
        now = set(kind.output_classes(self.classes_.tolist()))
        kept = [i for i, c in enumerate(kind.output_classes(previous)) if c in now]
        if len(kept) < len(self.coef_) and not kind.single_logit:  # outputs are classes
            old.classes_ = np.asarray([previous[i] for i in kept])
            old.coef_, old.intercept_ = self.coef_[kept], self.intercept_[kept]
        return self._mapped(old, n_features, fill=None)

    def _mapped(
        self, other: LinearHead, n_features: int, fill: float | None
    ) -> LinearSolution | None:
        """``other``'s weights on this head's outputs (``classes_``): an output it lacks
        gets zero weights and the intercept ``fill`` (None: its lowest). None when
        ``other`` has an output this head lacks or other features."""
        kind = self.head_kind
        old_out = kind.output_classes(other.classes_.tolist())
        new_out = kind.output_classes(self.classes_.tolist())
        coef, intercept = other.coef_, other.intercept_
        if coef.shape != (len(old_out), n_features) or not set(old_out) <= set(new_out):
            return None
        if old_out == new_out:
            return LinearSolution(coef, intercept, 0)
        row = {c: i for i, c in enumerate(old_out)}
        start = float(intercept.min()) if fill is None else fill
        mapped = np.zeros((len(new_out), n_features), dtype=coef.dtype)
        offsets = np.full(len(new_out), start, intercept.dtype)
        for j, c in enumerate(new_out):
            if c in row:
                mapped[j], offsets[j] = coef[row[c]], intercept[row[c]]
        return LinearSolution(mapped, offsets, 0)

    def _soft_columns(self, labels: Sequence[Any], P: Any, *, rows: int) -> np.ndarray:
        """``P``'s columns in the order of ``classes_`` (binary: the positive class's)."""
        P = np.asarray(P, dtype=np.float64)
        names = list(labels)
        if P.ndim != 2 or P.shape != (rows, len(names)):
            raise DataError(
                f"soft targets must be {rows} rows x {len(names)} labels, got shape {P.shape}"
            )
        if not np.isfinite(P).all() or P.min() < 0 or P.max() > 1:
            raise DataError("soft targets must be probabilities in [0, 1]")
        where = {label: i for i, label in enumerate(names)}
        kind = self.head_kind
        classes = kind.output_classes(self.classes_.tolist())
        return kind.soft_target(P[:, [where[c] for c in classes]])

    def _select_C(self, solve, warm, X_val, y_val):  # type: ignore[no-untyped-def]
        """Walk C by factors of 4 while the calibrated validation log-loss improves: from
        1, or, warm-started, from the C chosen before; within [1/64, 1024], or, with a
        prior, [1/4096, 1024] (near the prior itself)."""
        X_val = check_array(X_val, accept_sparse="csr", dtype=(np.float32, np.float64))
        X_val, target = self._known_validation(X_val, y_val)
        low = _C_MIN if self.prior is None else _C_MIN_PRIOR
        start = float(getattr(self, "C_", 1.0)) if warm is not None else 1.0
        start = min(max(start, low), _C_MAX)
        if len(target) == 0:
            return start, solve(start, warm)

        def score(sol: LinearSolution) -> float:
            return self._calibrated_loss(X_val, target, sol.coef, sol.intercept)

        first = solve(start, warm)
        results = {start: (score(first), first)}
        for factor in (4.0, 0.25):
            C, sol = start, first
            while low <= C * factor <= _C_MAX:
                C *= factor
                sol = solve(C, sol)
                results[C] = (score(sol), sol)
                if results[C][0] >= results[C / factor][0]:
                    break
            up = results.get(start * 4.0, (np.inf,))[0]
            if len(results) > 2 or up < results[start][0]:
                break  # improving upwards: no need to look below the start
        best = min(results, key=lambda c: results[c][0])
        return best, results[best][1]

    def _calibrated_loss(self, X_val: Any, target: np.ndarray, coef: Any, intercept: Any) -> float:
        z = self.head_kind.flat_logits(X_val @ coef.T + intercept)
        return float(calibrated_nll(z, target, self.kind)[1])

    def validation_losses(self, X_val: Any, y_val: Any) -> np.ndarray:
        """Each row's log-loss of ``(X_val, y_val)`` at the temperature that minimises
        their mean (the mean is what ``C="auto"`` minimises): the paired losses two heads
        are compared on (``part_weights="auto"``)."""
        check_is_fitted(self, "coef_")
        X_val = check_array(X_val, accept_sparse="csr", dtype=(np.float32, np.float64))
        X_val, target = self._known_validation(X_val, y_val)
        if len(target) == 0:
            return np.zeros(0)
        z = self.head_kind.flat_logits(X_val @ self.coef_.T + self.intercept_)
        return calibrated_row_nll(z, target, self.kind)

    def refit_keeping_calibration(
        self, X: Any, y: Any, *, soft_target: tuple[Sequence[Any], Any] | None = None
    ) -> LinearHead:
        """Fit again on ``X`` / ``y`` (all rows; warm start; ``soft_target`` as in
        :meth:`fit`), keeping the temperature and the thresholds fitted on the
        validation split."""
        temperature = self.temperature_
        old, old_classes = self.thresholds_.copy(), self.classes_.tolist()
        self.set_params(warm_start=True)
        try:
            self.fit(X, y, soft_target=soft_target)
        finally:
            self.set_params(warm_start=False)
        self.temperature_ = temperature
        kept = self.head_kind.carry_thresholds(old, old_classes, self.classes_.tolist())
        if kept is not None:
            self.thresholds_ = kept
        return self

    def _label_weights(self, Y: np.ndarray) -> np.ndarray | None:
        """Per-label weight of positive examples for multilabel ``class_weight``."""
        if self.class_weight is None:
            return None
        if self.class_weight == "balanced":
            pos = Y.sum(0)
            neg = Y.shape[0] - pos
            return np.clip(neg / np.maximum(pos, 1), 1.0, 100.0)
        assert isinstance(self.class_weight, dict)
        return np.array([float(self.class_weight.get(c, 1.0)) for c in self.classes_.tolist()])

    def calibrate_on(self, X_val: Any, y_val: Any) -> LinearHead:
        """Fit the temperature (if ``calibrate``) and the thresholds on validation data."""
        check_is_fitted(self, "coef_")
        X_val = check_array(X_val, accept_sparse="csr", dtype=(np.float32, np.float64))
        X_val, target = self._known_validation(X_val, y_val)
        self._calibrate(X_val, target)
        return self

    def crossfit_temperature(
        self,
        X: Any,
        y: Any,
        *,
        groups: Sequence[Any] | None = None,
        n_folds: int = 5,
        seed: int = 0,
    ) -> dict[str, Any]:
        """Re-fit the temperature on out-of-fold logits of ``(X, y)`` (multiclass heads).

        The head was fitted on all of ``X`` (at ``C_``); a temperature fitted on a
        validation split of a smaller model would be too low for it, because a model
        fitted on more rows is more confident. Here ``n_folds`` models at the same
        ``C_`` (folds by ``groups`` when given; fitted in threads) give a logit for
        every row from a model that did not see it; the temperature minimising their
        log-loss replaces ``temperature_``. Returns the
        temperature, the out-of-fold expected calibration error at it, the rows used
        and the out-of-fold probabilities at the temperature (``proba``) of the rows
        a fold answered (``proba_rows``).
        """
        import warnings

        from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

        from .calibration import expected_calibration_error, fit_temperature

        check_is_fitted(self, "coef_")
        if not self.head_kind.exclusive:
            raise ConfigError("crossfit_temperature is for multiclass heads")
        X = check_array(X, accept_sparse="csr", dtype=(np.float32, np.float64))
        y_arr = np.asarray(y)
        if len(y_arr) != X.shape[0]:
            raise DataError(f"X has {X.shape[0]} rows but y has {len(y_arr)} labels")
        n_groups = len(set(groups)) if groups is not None else len(y_arr)
        k = min(int(n_folds), n_groups)
        if k < 2:
            return {"temperature": float(self.temperature_), "n": 0}
        if groups is not None:
            splitter: Any = GroupKFold(n_splits=k)
            folds = splitter.split(X, y_arr, list(groups))
        else:
            _, counts = np.unique(y_arr, return_counts=True)
            splitter = (
                StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
                if counts.min() >= k
                else KFold(n_splits=k, shuffle=True, random_state=seed)
            )
            folds = splitter.split(X, y_arr)
        column = {c: i for i, c in enumerate(self.classes_.tolist())}
        logits = np.full((len(y_arr), len(self.classes_)), -np.inf, dtype=np.float64)
        seen = np.zeros(len(y_arr), dtype=bool)
        params = {**self.get_params(deep=False), "C": float(self.C_), "calibrate": False}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn: "least populated class" warnings
            folds = [f for f in folds if len(np.unique(y_arr[f[0]])) >= 2]

        def fit_fold(train_idx: np.ndarray) -> LinearHead:
            # cold start: a start from this head's weights (which saw the held-out
            # rows) keeps some of them at the solver's tolerance and lowers the temperature
            return LinearHead(**{**params, "warm_start": False}).fit(X[train_idx], y_arr[train_idx])

        n_jobs = max(1, min(len(folds), os.cpu_count() or 1))
        if n_jobs > 1:  # the folds' matrix products release the GIL: one BLAS thread each
            with threadpool_limits(limits=1), ThreadPoolExecutor(n_jobs) as pool:
                models = list(pool.map(fit_fold, [f[0] for f in folds]))
        else:
            models = [fit_fold(f[0]) for f in folds]
        for fold, (_, test_idx) in zip(models, folds, strict=True):
            cols = [column[c] for c in fold.classes_.tolist()]
            block = np.full((len(test_idx), len(self.classes_)), -np.inf)
            block[:, cols] = fold.decision_function(X[test_idx], raw=True)
            logits[test_idx] = block
            seen[test_idx] = np.isin(y_arr[test_idx], fold.classes_)
        if not seen.any():
            return {"temperature": float(self.temperature_), "n": 0}
        z = logits[seen]
        z[~np.isfinite(z)] = -1e9
        target = np.array([column[v] for v in y_arr[seen].tolist()], dtype=np.int64)
        if self.calibrate:
            self.temperature_ = fit_temperature(z, target, "multiclass")
        proba = self.proba_from_logits((z / self.temperature_).astype(np.float32))
        ece = expected_calibration_error(proba.max(1), proba.argmax(1) == target)
        rows = np.flatnonzero(np.isfinite(logits).any(axis=1))
        every = np.where(np.isfinite(logits[rows]), logits[rows], -1e9) / self.temperature_
        return {
            "temperature": float(self.temperature_),
            "ece_cv": ece,
            "n": int(seen.sum()),
            "proba": self.proba_from_logits(every.astype(np.float32)),
            "proba_rows": rows,
        }

    # -- prediction --------------------------------------------------------

    def _logits(self, X: Any) -> np.ndarray:
        return np.asarray(X @ self.coef_.T + self.intercept_)


def _sorted_union(a: list[Any], b: list[Any]) -> list[Any]:
    """The labels of both lists, sorted (in ``b``'s order when they cannot be)."""
    both = list(dict.fromkeys([*b, *a]))
    try:
        return sorted(both)
    except TypeError:
        return both


def _teacher_classes(labels: Sequence[Any]) -> list[Any]:
    names = list(labels)
    if len(set(names)) != len(names):
        raise DataError("soft targets name a label twice")
    try:
        return sorted(names)
    except TypeError as exc:
        raise DataError(f"soft target labels must be of one comparable type ({exc})") from None


def head_to_record(head: LinearHead) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON-ready description of a fitted head and its weight tensors."""
    check_is_fitted(head, "coef_")
    record = {
        "type": "linear",
        **head._record_fields(),
        "params": {
            "C": head.C if head.C == "auto" else float(head.C),
            "C_": float(head.C_),
            "class_weight": head.class_weight,
            "calibrate": bool(head.calibrate),
            "thresholds": head.thresholds,
            "max_iter": int(head.max_iter),
        },
    }
    tensors = {
        "coef": np.ascontiguousarray(head.coef_, dtype=np.float32),
        "intercept": np.ascontiguousarray(head.intercept_, dtype=np.float32),
    }
    return record, tensors


def head_from_record(record: dict[str, Any], tensors: dict[str, np.ndarray]) -> LinearHead:
    """Rebuild a fitted head from :func:`head_to_record` output; checks every field
    (:func:`~manyheads.heads.record.check_record`) and shape."""
    found = record.get("type", "linear") if isinstance(record, dict) else None
    if found != "linear":
        raise DataError(f"head record has type {found!r}, expected 'linear'")
    checked = check_record(record, tensors)
    kind, params = checked.kind, checked.params
    head = LinearHead(
        kind=kind,
        **{
            k: v
            for k, v in params.items()
            if k in ("C", "class_weight", "calibrate", "thresholds", "max_iter")
        },
    )
    try:
        head.check_params()
    except ConfigError as exc:
        raise DataError(f"linear head record has a bad parameter: {exc}") from None
    C_ = params.get("C_", 1.0 if head.C == "auto" else head.C)
    if isinstance(C_, bool) or not isinstance(C_, int | float) or not 0 < C_ < np.inf:
        raise DataError(f"linear head record has a bad parameter: C_ must be > 0, got {C_!r}")
    coef, intercept = checked.tensors["coef"], checked.tensors["intercept"]
    head._restore(checked)
    head.C_ = float(C_)
    head.coef_ = coef
    head.intercept_ = intercept
    head.n_features_in_ = int(coef.shape[1])
    head.n_iter_ = 0
    return head
