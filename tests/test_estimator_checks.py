"""scikit-learn's own estimator checks on the heads (``parametrize_with_checks``).

Every check runs; the ones that cannot apply by design are listed, each with the
reason, in :func:`_expected_failed_checks`. They run as strict xfails: a listed
check that starts to pass fails the test, so the list stays true.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from manyheads.errors import DataError
from manyheads.heads.linear import LinearHead
from manyheads.heads.mlp import MLPHead, MLPTraining

# Reasons shared by both head types and every kind.
_ALWAYS = {
    "check_n_features_in_after_fitting": (
        "a wrong feature count is refused with DataError (a ValueError) worded "
        "'X has 1 features but the head was fitted on 4', not sklearn's "
        "'... is expecting 4 features as input'"
    ),
    "check_fit2d_1sample": (
        "one row is refused with DataError 'labels have a single class (1); a "
        "classifier needs at least two', wording the check does not recognise"
    ),
}
# kind="multiclass" on a two-class problem: a softmax over two columns.
_TWO_COLUMNS = (
    "kind='multiclass' gives one logit column per class even for two classes; "
    "sklearn's 1-D binary decision_function is kind='binary'"
)
_MULTICLASS = {
    "check_classifiers_regression_target": (
        "any finite number is a label (each distinct value its own class), so a "
        "continuous target is fitted as 200 classes instead of being refused"
    ),
    "check_classifiers_train": _TWO_COLUMNS + " (decision_function shape is (n, 2), not (n,))",
    "check_classifiers_classes": _TWO_COLUMNS + " (decision.ravel() > 0 mixes both columns)",
    "check_decision_proba_consistency": _TWO_COLUMNS + " (ranks of the flattened (n, 2) array)",
}
_BINARY = {
    "check_classifiers_regression_target": (
        "any finite number is a label, so a continuous target is refused as 'a binary "
        "head needs exactly 2 classes, got 200', without the word 'continuous'"
    ),
    "check_classifier_not_supporting_multiclass": (
        "a binary head refuses 3 classes with DataError 'a binary head needs exactly "
        "2 classes, got 3: [0, 1, 2]', not sklearn's 'Only binary classification is "
        "supported.'"
    ),
}
# LinearHead's only sample_weight path: the float32 L-BFGS solver (heads.solver).
_LINEAR = {
    name: (
        "the L-BFGS solver computes in float32: weighted and repeated-row fits agree "
        "to ~1e-5 (even at tol=1e-12), not the check's rtol=1e-7"
    )
    for name in (
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weight_equivalence_on_sparse_data",
    )
}
_MLP_BINARY = {
    "check_classifiers_train": (
        "without validation data the MLP holds out 10% of the rows and tunes the "
        "binary threshold on them (0.725 here), so predict is not decision_function > 0"
    ),
}


def _expected_failed_checks(estimator: BaseEstimator) -> dict[str, str]:
    """The checks that cannot apply to ``estimator``, each with the reason."""
    expected = dict(_ALWAYS)
    kind = estimator.get_params()["kind"]
    expected.update(_MULTICLASS if kind == "multiclass" else _BINARY)
    if isinstance(estimator, LinearHead):
        expected.update(_LINEAR)
    elif kind == "binary":
        expected.update(_MLP_BINARY)
    return expected


# small and fast: the MLP trains a few epochs of 8 hidden units (lr raised so that
# they are enough for the checks' accuracy thresholds)
_MLP_PARAMS = {"hidden": 8, "training": MLPTraining(max_epochs=10, lr=0.03), "random_state": 0}


@parametrize_with_checks(
    [LinearHead(), LinearHead(kind="binary")],
    expected_failed_checks=_expected_failed_checks,
    xfail_strict=True,
)
def test_linear_head_sklearn_checks(
    estimator: BaseEstimator, check: Callable[[BaseEstimator], None]
) -> None:
    check(estimator)


@parametrize_with_checks(
    [MLPHead(**_MLP_PARAMS), MLPHead(kind="binary", **_MLP_PARAMS)],
    expected_failed_checks=_expected_failed_checks,
    xfail_strict=True,
)
def test_mlp_head_sklearn_checks(
    estimator: BaseEstimator, check: Callable[[BaseEstimator], None]
) -> None:
    pytest.importorskip("torch")
    check(estimator)


# -- what the contract fixes added, beyond what the checks look at -------------------


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_label_refused(value: float) -> None:
    X = np.eye(4)
    with pytest.raises(DataError, match=r"label #2 is -?(nan|inf), not a finite number"):
        LinearHead().fit(X, [0.0, 1.0, value, 1.0])


def test_column_vector_y_fits_as_1d() -> None:
    X = np.random.default_rng(0).normal(size=(12, 3))
    y = np.arange(12) % 3
    flat = LinearHead().fit(X, y)
    with pytest.warns(DataConversionWarning, match="A column-vector y was passed"):
        column = LinearHead().fit(X, y[:, None])
    np.testing.assert_array_equal(column.predict_proba(X), flat.predict_proba(X))
    with pytest.raises(DataError, match="multiclass targets must be one label per row"):
        LinearHead().fit(X, np.stack([y, y], axis=1))


def test_all_zero_sample_weight_refused() -> None:
    X = np.eye(4)
    with pytest.raises(DataError, match="sample_weight must contain at least one non-zero"):
        LinearHead().fit(X, [0, 1, 0, 1], sample_weight=np.zeros(4))


def test_missing_y_refused() -> None:
    with pytest.raises(DataError, match="MLPHead requires y to be passed"):
        MLPHead().fit(np.eye(4), None)
