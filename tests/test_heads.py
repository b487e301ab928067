from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from manyheads import ConfigError, DataError, FusedHeads, LinearHead
from manyheads.heads import fit_temperature, head_from_record, head_to_record, tune_thresholds
from manyheads.heads.calibration import tune_binary_threshold


def _blobs(n=600, d=24, k=4, seed=0, spread=1.2):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d))
    y = rng.integers(0, k, n)
    X = centers[y] * spread + rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), np.array([f"c{i}" for i in y])


def _multilabel(n=600, d=24, n_labels=5, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    W = rng.normal(size=(d, n_labels))
    Y = (X @ W + rng.normal(size=(n, n_labels)) * 0.5) > 1.0
    labels = [[f"l{j}" for j in np.flatnonzero(row)] for row in Y]
    return X, labels, Y


def test_not_fitted_error():
    with pytest.raises(NotFittedError, match="not fitted yet"):
        LinearHead().predict(np.zeros((2, 3)))


def test_multiclass_matches_scikit_learn_logistic_regression():
    X, y = _blobs()
    ours = LinearHead(calibrate=False).fit(X, y)
    ref = LogisticRegression(C=1.0, max_iter=1000).fit(X, y)
    assert list(ours.classes_) == list(ref.classes_)
    agree = (ours.predict(X) == ref.predict(X)).mean()
    assert agree > 0.99
    # each stops at a gradient of 1e-4, ours in whitened variables: a step apart
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=4e-3)
    # both solved to a tight tolerance (ours in float32): the same objective and optimum
    ours = LinearHead(calibrate=False, tol=1e-8, max_iter=5000).fit(X, y)
    ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=5e-4)


def test_binary_matches_scikit_learn_logistic_regression():
    X, y = _blobs(k=2)
    ours = LinearHead(kind="binary", calibrate=False).fit(X, y)
    ref = LogisticRegression(C=1.0, max_iter=1000).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=2e-3)
    assert ours.coef_.shape == (1, X.shape[1])


def test_fit_returns_self_and_learned_attributes_end_in_underscore():
    X, y = _blobs()
    head = LinearHead()
    assert head.fit(X, y) is head
    for attr in (
        "classes_",
        "coef_",
        "intercept_",
        "temperature_",
        "thresholds_",
        "n_features_in_",
        "n_iter_",
    ):
        assert hasattr(head, attr)
    assert clone(head).get_params() == head.get_params()
    assert not hasattr(clone(head), "coef_")


def test_temperature_scaling_lowers_validation_log_loss():
    X, y = _blobs(n=1500, d=48, k=6, spread=0.6, seed=3)
    tr, va = slice(0, 700), slice(700, 1500)
    raw = LinearHead(calibrate=False, C=100.0).fit(X[tr], y[tr])
    cal = LinearHead(calibrate=True, C=100.0).fit(X[tr], y[tr], X_val=X[va], y_val=y[va])
    assert cal.temperature_ != 1.0
    assert log_loss(y[va], cal.predict_proba(X[va]), labels=cal.classes_) < log_loss(
        y[va], raw.predict_proba(X[va]), labels=raw.classes_
    )


def test_fit_temperature_recovers_known_temperature():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4000, 5)) * 3
    p = np.exp(logits / 2.0)
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(5, p=row) for row in p])
    assert fit_temperature(logits, y, "multiclass") == pytest.approx(2.0, rel=0.1)


def test_multilabel_head_label_lists_and_thresholds():
    X, labels, Y = _multilabel()
    head = LinearHead(kind="multilabel").fit(
        X[:400], labels[:400], X_val=X[400:], y_val=labels[400:]
    )
    assert head.classes_.tolist() == [f"l{j}" for j in range(5)]
    assert head.thresholds_.shape == (5,)
    assert ((head.thresholds_ > 0) & (head.thresholds_ < 1)).all()
    pred = head.predict(X[400:])
    assert pred.shape == (200, 5)
    assert (pred == Y[400:]).mean() > 0.8


def test_multilabel_accepts_indicator_matrix():
    X, _, Y = _multilabel()
    head = LinearHead(kind="multilabel").fit(X, Y.astype(int))
    assert head.predict_proba(X).shape == (600, 5)


def test_tune_thresholds_prefers_f1_optimal_cut():
    proba = np.array([[0.9], [0.35], [0.3], [0.1]])
    truth = np.array([[1], [1], [0], [0]])
    thr = tune_thresholds(proba, truth)
    assert 0.3 < thr[0] <= 0.35


def test_f05_thresholds_weigh_precision_and_cut_higher():
    # a label scored high on its 4 positives and on some negatives: F1 takes the low cut
    # that finds every positive, F0.5 the higher one that leaves the false alarms out
    proba = np.array([[0.9], [0.8], [0.4], [0.4], [0.4], [0.4], [0.4], [0.1], [0.1]])
    truth = np.array([[1], [1], [1], [1], [0], [0], [0], [0], [0]])
    f1, f05 = tune_thresholds(proba, truth), tune_thresholds(proba, truth, "f0.5")
    assert 0.1 < f1[0] <= 0.4 and 0.4 < f05[0] <= 0.8
    assert (tune_thresholds(proba, truth, "f1") == f1).all()  # f1 unchanged by the beta
    p, t = proba.ravel(), truth.ravel().astype(bool)
    assert tune_binary_threshold(p, t, "f0.5") >= tune_binary_threshold(p, t, "f1")


def test_binary_threshold_is_tuned_on_validation():
    X, y = _blobs(n=800, k=2, spread=0.5, seed=5)
    head = LinearHead(kind="binary").fit(X[:500], y[:500], X_val=X[500:], y_val=y[500:])
    assert head.thresholds_.shape == (1,)
    assert set(head.predict(X)) <= set(head.classes_)


def test_class_weight_balanced_raises_minority_recall():
    rng = np.random.default_rng(0)
    n = 2000
    y = np.where(rng.random(n) < 0.05, "rare", "common")
    X = rng.normal(size=(n, 16)) + (y == "rare")[:, None] * 0.6
    plain = LinearHead(calibrate=False).fit(X, y)
    balanced = LinearHead(calibrate=False, class_weight="balanced").fit(X, y)
    rare = y == "rare"
    assert (balanced.predict(X)[rare] == "rare").mean() > (plain.predict(X)[rare] == "rare").mean()


def test_single_class_is_refused():
    with pytest.raises(DataError, match=r"labels have a single class \('a'\)"):
        LinearHead().fit(np.zeros((3, 2)), ["a", "a", "a"])


def test_binary_needs_two_classes():
    X, y = _blobs(k=3)
    with pytest.raises(DataError, match="a binary head needs exactly 2 classes, got 3"):
        LinearHead(kind="binary").fit(X, y)


def test_bad_kind_and_params():
    with pytest.raises(
        ConfigError, match="head kind must be one of multiclass, binary, multilabel"
    ):
        LinearHead(kind="regression").fit(np.zeros((2, 2)), ["a", "b"])
    with pytest.raises(ConfigError, match="C must be a positive number or 'auto', got -1"):
        LinearHead(C=-1).fit(np.zeros((2, 2)), ["a", "b"])
    with pytest.raises(ConfigError, match="class_weight must be None, 'balanced' or a dict"):
        LinearHead(class_weight="heavy").fit(np.zeros((2, 2)), ["a", "b"])


def test_multilabel_targets_must_be_lists():
    with pytest.raises(DataError, match="multilabel target #0 must be a list of labels, got str"):
        LinearHead(kind="multilabel").fit(np.zeros((2, 2)), ["a", "b"])


def test_row_count_mismatch():
    with pytest.raises(DataError, match="X has 3 rows but y has 2 labels"):
        LinearHead().fit(np.zeros((3, 2)), ["a", "b"])


def test_feature_count_mismatch_at_predict():
    X, y = _blobs()
    head = LinearHead().fit(X, y)
    with pytest.raises(DataError, match="X has 5 features but the head was fitted on 24"):
        head.predict(np.zeros((1, 5)))


def test_warm_start_refit_converges_faster():
    X, y = _blobs(n=2000, d=64, k=8, spread=0.5)
    head = LinearHead(calibrate=False, C=10.0, tol=1e-6).fit(X[:1600], y[:1600])
    cold = LinearHead(calibrate=False, C=10.0, tol=1e-6).fit(X, y)
    head.set_params(warm_start=True).fit(X, y)
    assert head.n_iter_ < cold.n_iter_
    np.testing.assert_allclose(head.predict_proba(X), cold.predict_proba(X), atol=1e-2)


def test_record_round_trip_preserves_predictions():
    X, y = _blobs()
    head = LinearHead().fit(X[:400], y[:400], X_val=X[400:], y_val=y[400:])
    record, tensors = head_to_record(head)
    again = head_from_record(record, tensors)
    np.testing.assert_array_equal(again.predict(X), head.predict(X))
    np.testing.assert_allclose(again.predict_proba(X), head.predict_proba(X), rtol=1e-6)


def test_record_shape_errors():
    X, y = _blobs()
    record, tensors = head_to_record(LinearHead().fit(X, y))
    tensors["coef"] = tensors["coef"][:2]
    with pytest.raises(DataError, match=r"head weights have shape \(2, 24\)"):
        head_from_record(record, tensors)


def test_fused_heads_equal_separate_heads_and_subsets():
    X, y = _blobs()
    Xm, labels, _ = _multilabel(n=600, d=24)
    yb = np.where(y == "c0", "yes", "no")
    heads = {
        "topic": LinearHead().fit(X[:400], y[:400], X_val=X[400:], y_val=y[400:]),
        "flag": LinearHead(kind="binary").fit(X[:400], yb[:400], X_val=X[400:], y_val=yb[400:]),
        "tags": LinearHead(kind="multilabel").fit(
            Xm[:400], labels[:400], X_val=Xm[400:], y_val=labels[400:]
        ),
    }
    fused = FusedHeads(heads)
    assert fused.W.shape == (24, 4 + 1 + 5)
    probs = fused.probabilities(X)
    for name, head in heads.items():
        np.testing.assert_allclose(probs[name], head.predict_proba(X), atol=1e-5)
    answers = fused.predict(X[:3])
    assert set(answers[0]) == {"topic", "flag", "tags"}
    assert answers[0]["topic"]["label"] == heads["topic"].predict(X[:1])[0]
    assert answers[0]["flag"]["label"] == heads["flag"].predict(X[:1])[0]
    tags_pred = heads["tags"].predict(X[:1])[0]
    assert answers[0]["tags"]["labels"] == [f"l{j}" for j in np.flatnonzero(tags_pred)]
    only = fused.predict(X[:3], ["tags"])
    assert set(only[0]) == {"tags"}
    assert only[0]["tags"] == answers[0]["tags"]


def test_auto_C_walks_the_path_and_picks_by_validation_loss():
    X, y = _blobs(n=1600, d=48, k=6, spread=0.6, seed=3)
    tr, va = slice(0, 1000), slice(1000, 1600)
    auto = LinearHead(C="auto").fit(X[tr], y[tr], X_val=X[va], y_val=y[va])
    assert auto.C_ in {1.0 / 64 * 4**i for i in range(9)}
    from manyheads.heads.calibration import calibrated_nll

    def val_loss(C):
        h = LinearHead(C=C, calibrate=False, tol=1e-6).fit(X[tr], y[tr])
        return calibrated_nll(h.decision_function(X[va]), h._encode_targets(y[va]), "multiclass")[1]

    # the chosen C is no worse than its neighbours on the grid
    assert val_loss(auto.C_) <= min(val_loss(auto.C_ * 4), val_loss(auto.C_ / 4)) + 1e-3


def test_auto_C_without_validation_data_means_one():
    X, y = _blobs()
    assert LinearHead(C="auto").fit(X, y).C_ == 1.0


def test_accuracy_thresholds_favour_exact_match():
    X, labels, Y = _multilabel(n=1200, seed=4)
    kw = {"kind": "multilabel", "C": 1.0}
    f1 = LinearHead(**kw).fit(X[:800], labels[:800], X_val=X[800:1000], y_val=labels[800:1000])
    acc = LinearHead(thresholds="accuracy", **kw).fit(
        X[:800], labels[:800], X_val=X[800:1000], y_val=labels[800:1000]
    )
    exact = lambda h: (h.predict(X[1000:]) == Y[1000:]).all(axis=1).mean()  # noqa: E731
    assert exact(acc) >= exact(f1)
    assert not np.array_equal(acc.thresholds_, f1.thresholds_)
    with pytest.raises(
        ConfigError, match="thresholds must be one of f1, f0.5, accuracy, got 'recall'"
    ):
        LinearHead(thresholds="recall").fit(X, [lab[:1] or ["x"] for lab in labels])


def test_crossfit_temperature_corrects_an_overconfident_full_data_fit():
    X, y = _blobs(n=5000, d=100, k=4, seed=5, spread=0.25)
    X, y, X_test, y_test = X[:1000], y[:1000], X[1000:], y[1000:]
    head = LinearHead(C=100.0).fit(X, y)  # little regularisation: overconfident
    assert head.temperature_ == 1.0
    before = log_loss(y_test, head.predict_proba(X_test), labels=head.classes_)
    oracle = fit_temperature(
        head.decision_function(X_test, raw=True),
        np.searchsorted(head.classes_, y_test),
        "multiclass",
    )
    found = head.crossfit_temperature(X, y, groups=np.arange(len(y)) // 4)
    assert found["temperature"] == head.temperature_
    assert abs(np.log(head.temperature_ / oracle)) < 0.15  # oracle ~2.6 on the test rows
    assert found["n"] == len(y) and 0 <= found["ece_cv"] < 0.1
    after = log_loss(y_test, head.predict_proba(X_test), labels=head.classes_)
    assert after < 0.8 * before


def test_crossfit_temperature_refuses_other_kinds_and_bad_rows():
    X, labels, _ = _multilabel()
    head = LinearHead(kind="multilabel").fit(X, labels)
    with pytest.raises(ConfigError, match="for multiclass heads"):
        head.crossfit_temperature(X, labels)
    X, y = _blobs()
    head = LinearHead().fit(X, y)
    with pytest.raises(DataError, match="600 rows but y has 10 labels"):
        head.crossfit_temperature(X, y[:10])
    # one group: no folds possible, the temperature stays
    assert head.crossfit_temperature(X, y, groups=[0] * len(y)) == {"temperature": 1.0, "n": 0}
