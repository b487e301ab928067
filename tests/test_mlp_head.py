from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import log_loss

from manyheads import ConfigError, DataError, LinearHead, MissingDependencyError
from manyheads.heads import any_head_from_record, any_head_to_record
from manyheads.heads.mlp import MLPHead, MLPTraining, mlp_head_from_record, mlp_head_to_record

torch = pytest.importorskip("torch")

SMALL = {"hidden": 32, "training": MLPTraining(max_epochs=60), "random_state": 0}


def _rings(n=1200, noise_dims=4, seed=0):
    """Three concentric rings in 2-D (plus noise dimensions): no linear separation."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    radius = y + rng.uniform(0.15, 0.85, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    X = np.column_stack(
        [radius * np.cos(angle), radius * np.sin(angle), rng.normal(size=(n, noise_dims)) * 0.3]
    )
    return X.astype(np.float32), np.array(["inner", "middle", "outer"])[y]


def _xor(n=1200, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 6)).astype(np.float32)
    y = np.where(X[:, 0] * X[:, 1] > 0, "same", "diff")
    return X, y


def _multilabel(n=1200, seed=2):
    """l0: XOR of two signs, l1: |x2| large, l2: linear; each row's label list."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 6)).astype(np.float32)
    Y = np.column_stack([X[:, 0] * X[:, 1] > 0, np.abs(X[:, 2]) > 0.6, X[:, 3] > 0.2])
    labels = [[f"l{j}" for j in np.flatnonzero(row)] for row in Y]
    return X, labels, Y.astype(int)


def _accuracy(head, X, y):
    return float((head.predict(X) == y).mean())


# -- contract ------------------------------------------------------------------


def test_not_fitted_error():
    head = MLPHead()
    with pytest.raises(NotFittedError, match="not fitted yet"):
        head.predict(np.zeros((2, 3)))
    with pytest.raises(NotFittedError, match="not fitted yet"):
        head.decision_function(np.zeros((2, 3)))
    with pytest.raises(NotFittedError, match="not fitted yet"):
        head.calibrate_on(np.zeros((2, 3)), ["a", "b"])
    with pytest.raises(NotFittedError, match="not fitted yet"):
        mlp_head_to_record(head)


def test_fit_returns_self_learned_attributes_and_clone():
    X, y = _rings(n=400)
    head = MLPHead(**SMALL)
    assert head.fit(X[:300], y[:300], X_val=X[300:], y_val=y[300:]) is head
    assert head.W1_.shape == (6, 32) and head.W1_.dtype == np.float32
    assert head.b1_.shape == (32,) and head.b1_.dtype == np.float32
    assert head.W2_.shape == (32, 3) and head.W2_.dtype == np.float32
    assert head.b2_.shape == (3,) and head.b2_.dtype == np.float32
    assert head.thresholds_.shape == (1,)
    assert head.n_features_in_ == 6
    assert head.n_outputs_ == 3
    assert 1 <= head.best_epoch_ <= head.n_epochs_ <= 60
    assert head.classes_.tolist() == ["inner", "middle", "outer"]
    assert clone(head).get_params() == head.get_params()
    assert not hasattr(clone(head), "W1_")


def test_fit_leaves_torch_threads_and_global_rng_alone():
    X, y = _xor(n=300)
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    MLPHead(kind="binary", **SMALL).fit(X, y)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), state)


# -- each kind beats a linear head on non-linear data ----------------------------


def test_multiclass_rings_beat_linear_head():
    X, y = _rings()
    tr, va, te = slice(0, 800), slice(800, 1000), slice(1000, None)
    mlp = MLPHead(hidden=64, training=MLPTraining(max_epochs=100)).fit(
        X[tr], y[tr], X_val=X[va], y_val=y[va]
    )
    linear = LinearHead().fit(X[tr], y[tr], X_val=X[va], y_val=y[va])
    assert _accuracy(mlp, X[te], y[te]) > 0.9
    assert _accuracy(mlp, X[te], y[te]) > _accuracy(linear, X[te], y[te]) + 0.2
    proba = mlp.predict_proba(X[te])
    assert proba.shape == (200, 3)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(mlp.proba_from_logits(mlp.decision_function(X[te])), proba)
    np.testing.assert_array_equal(mlp.predict_from_proba(proba), mlp.predict(X[te]))


def test_binary_xor_beats_linear_head_and_tunes_threshold():
    X, y = _xor()
    tr, va, te = slice(0, 800), slice(800, 1000), slice(1000, None)
    mlp = MLPHead(kind="binary", hidden=64, training=MLPTraining(max_epochs=100)).fit(
        X[tr], y[tr], X_val=X[va], y_val=y[va]
    )
    linear = LinearHead(kind="binary").fit(X[tr], y[tr], X_val=X[va], y_val=y[va])
    assert mlp.classes_.tolist() == ["diff", "same"]
    assert mlp.n_outputs_ == 1 and mlp.W2_.shape == (64, 1)
    assert mlp.thresholds_.shape == (1,) and 0 < mlp.thresholds_[0] < 1
    assert mlp.decision_function(X[te]).shape == (200,)
    assert mlp.predict_proba(X[te]).shape == (200, 2)
    assert set(mlp.predict(X[te])) <= {"diff", "same"}
    assert _accuracy(mlp, X[te], y[te]) > 0.85
    assert _accuracy(mlp, X[te], y[te]) > _accuracy(linear, X[te], y[te]) + 0.2


def test_multilabel_label_lists_beat_linear_head():
    X, labels, Y = _multilabel()
    tr, va, te = slice(0, 800), slice(800, 1000), slice(1000, None)
    mlp = MLPHead(kind="multilabel", hidden=64, training=MLPTraining(max_epochs=100)).fit(
        X[tr], labels[tr], X_val=X[va], y_val=labels[va]
    )
    linear = LinearHead(kind="multilabel").fit(X[tr], labels[tr], X_val=X[va], y_val=labels[va])
    assert mlp.classes_.tolist() == ["l0", "l1", "l2"]
    assert mlp.thresholds_.shape == (3,)
    assert ((mlp.thresholds_ > 0) & (mlp.thresholds_ < 1)).all()
    pred = mlp.predict(X[te])
    assert pred.shape == (200, 3) and set(np.unique(pred)) <= {0, 1}
    assert (pred == Y[te]).mean() > 0.85
    assert (pred == Y[te]).mean() > (linear.predict(X[te]) == Y[te]).mean() + 0.1


def test_multilabel_accepts_indicator_matrix():
    X, _, Y = _multilabel(n=400)
    head = MLPHead(kind="multilabel", **SMALL).fit(X[:300], Y[:300], X_val=X[300:], y_val=Y[300:])
    assert head.classes_.tolist() == [0, 1, 2]
    assert head.predict_proba(X).shape == (400, 3)
    with pytest.raises(DataError, match="fitted on a 0/1 indicator matrix"):
        head.calibrate_on(X[:2], [["l0"], []])


def test_sparse_input_gives_the_same_head():
    X, y = _rings(n=400)
    dense = MLPHead(**SMALL).fit(X, y)
    sparse = MLPHead(**SMALL).fit(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(dense.W1_, sparse.W1_)
    np.testing.assert_allclose(
        sparse.predict_proba(sp.csr_matrix(X)), dense.predict_proba(X), rtol=1e-5, atol=1e-6
    )


# -- training behaviour ----------------------------------------------------------


def test_same_random_state_gives_identical_weights():
    X, y = _rings(n=500)
    a = MLPHead(**SMALL).fit(X, y)
    b = MLPHead(**SMALL).fit(X, y)
    c = MLPHead(**{**SMALL, "random_state": 1}).fit(X, y)
    for name in ("W1_", "b1_", "W2_", "b2_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.n_epochs_ == b.n_epochs_ and a.temperature_ == b.temperature_
    assert not np.array_equal(a.W1_, c.W1_)


def test_early_stopping_stops_and_keeps_the_best_epoch():
    # few noisy rows and a wide layer without dropout: the validation loss turns up early
    X, y = _noisy(n=300)
    params = {"hidden": 128, "dropout": 0.0, "random_state": 0}
    loop = MLPTraining(lr=1e-2, patience=4, max_epochs=500)
    head = MLPHead(training=loop, **params).fit(X[:150], y[:150], X_val=X[150:], y_val=y[150:])
    assert head.n_epochs_ < 500
    assert head.best_epoch_ < head.n_epochs_
    assert head.n_epochs_ - head.best_epoch_ == 4
    # the kept weights are those of epoch best_epoch_: training exactly that long
    # without validation data gives the same weights
    again = MLPHead(
        training=loop.replace(max_epochs=head.best_epoch_), validation_fraction=0.0, **params
    ).fit(X[:150], y[:150])
    assert again.n_epochs_ == again.best_epoch_ == head.best_epoch_
    np.testing.assert_array_equal(again.W1_, head.W1_)
    np.testing.assert_array_equal(again.W2_, head.W2_)


def _noisy(n=600, d=20, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X, np.where(X[:, 0] + rng.normal(size=n) * 1.5 > 0, "p", "n")


def test_without_validation_data_a_tenth_is_held_out():
    X, y = _noisy()
    held = MLPHead(
        hidden=128, dropout=0.0, training=MLPTraining(lr=1e-2, max_epochs=300, patience=4)
    ).fit(X, y)
    assert held.best_epoch_ < held.n_epochs_ < 300
    assert held.temperature_ != 1.0  # calibrated on the internal hold-out
    X, y = _rings(n=600)
    plain = MLPHead(hidden=32, training=MLPTraining(max_epochs=15), validation_fraction=0.0).fit(
        X, y
    )
    assert plain.n_epochs_ == plain.best_epoch_ == 15
    assert plain.temperature_ == 1.0
    # too few rows for a hold-out of 5: nothing held out either
    X, y = _rings(n=40)
    tiny = MLPHead(hidden=8, training=MLPTraining(max_epochs=3)).fit(X, y)
    assert tiny.n_epochs_ == 3 and tiny.temperature_ == 1.0


def test_temperature_scaling_lowers_validation_log_loss():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(600, 16)).astype(np.float32)
    y = np.array(["a", "b", "c"])[(X[:, :3] + rng.normal(size=(600, 3)) * 1.2).argmax(1)]
    # no validation data (so no early stopping), no dropout: an over-confident network
    params = {
        "hidden": 128,
        "dropout": 0.0,
        "training": MLPTraining(lr=1e-2, batch_size=32, max_epochs=40),
    }
    raw = MLPHead(validation_fraction=0.0, **params).fit(X[:200], y[:200])
    assert raw.temperature_ == 1.0
    before = log_loss(y[300:], raw.predict_proba(X[300:]), labels=raw.classes_)
    cal = clone(raw).fit(X[:200], y[:200])
    np.testing.assert_array_equal(cal.W1_, raw.W1_)
    cal.calibrate_on(X[300:], y[300:])
    assert cal.temperature_ > 2.0
    after = log_loss(y[300:], cal.predict_proba(X[300:]), labels=cal.classes_)
    assert after < before - 0.5
    # calibrate=False: thresholds only, the temperature stays 1
    fixed = MLPHead(validation_fraction=0.0, calibrate=False, **params).fit(X[:200], y[:200])
    assert fixed.calibrate_on(X[300:], y[300:]).temperature_ == 1.0


def test_calibrate_on_later_and_unseen_validation_labels_are_dropped():
    X, y = _xor(n=500)
    head = MLPHead(kind="binary", validation_fraction=0.0, **SMALL).fit(X[:300], y[:300])
    assert head.temperature_ == 1.0 and head.thresholds_.tolist() == [0.5]
    y_val = y[300:].copy().astype(object)
    y_val[:20] = "never-seen"
    assert head.calibrate_on(X[300:], y_val) is head
    assert head.temperature_ != 1.0
    # fitting with such validation data works too; all-unseen validation data is ignored
    MLPHead(kind="binary", **SMALL).fit(X[:300], y[:300], X_val=X[300:], y_val=y_val)
    MLPHead(kind="binary", **SMALL).fit(X[:300], y[:300], X_val=X[:5], y_val=["zz"] * 5)
    Xm, labels, _ = _multilabel(n=400)
    val = [[*labs, "never-seen"] for labs in labels[300:]]
    mlp = MLPHead(kind="multilabel", **SMALL).fit(Xm[:300], labels[:300], X_val=Xm[300:], y_val=val)
    assert mlp.thresholds_.shape == (3,)


def test_class_weight_balanced_raises_minority_recall():
    rng = np.random.default_rng(0)
    n = 1500
    y = np.where(rng.random(n) < 0.05, "rare", "common")
    X = (rng.normal(size=(n, 8)) + (y == "rare")[:, None] * 0.7).astype(np.float32)
    params = {
        "hidden": 32,
        "training": MLPTraining(max_epochs=30),
        "validation_fraction": 0.0,
        "calibrate": False,
    }
    plain = MLPHead(**params).fit(X, y)
    balanced = MLPHead(class_weight="balanced", **params).fit(X, y)
    rare = y == "rare"
    assert (balanced.predict(X)[rare] == "rare").mean() > (plain.predict(X)[rare] == "rare").mean()
    Xm, labels, _ = _multilabel(n=300)
    weighted = MLPHead(kind="multilabel", class_weight={"l1": 5.0}, **SMALL).fit(Xm, labels)
    assert weighted.predict(Xm).shape == (300, 3)


# -- records ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["multiclass", "binary", "multilabel"])
def test_record_round_trip_gives_identical_predictions(kind):
    if kind == "multilabel":
        X, y, _ = _multilabel(n=400)
    elif kind == "binary":
        X, y = _xor(n=400)
    else:
        X, y = _rings(n=400)
    head = MLPHead(kind=kind, class_weight="balanced", **SMALL).fit(
        X[:300], y[:300], X_val=X[300:], y_val=y[300:]
    )
    record, tensors = mlp_head_to_record(head)
    record = json.loads(json.dumps(record))  # JSON-ready
    assert record["type"] == "mlp" and record["kind"] == kind
    flat = set(head.get_params()) - {"kind", "training"} | set(MLPTraining.names())
    assert set(record["params"]) == flat
    assert set(tensors) == {"W1", "b1", "W2", "b2"}
    assert all(t.dtype == np.float32 for t in tensors.values())
    assert (record["thresholds"] is None) == (kind == "multiclass")
    again = mlp_head_from_record(record, tensors)
    assert again.get_params() == head.get_params()
    np.testing.assert_array_equal(again.predict(X), head.predict(X))
    np.testing.assert_array_equal(again.predict_proba(X), head.predict_proba(X))
    assert (again.n_epochs_, again.best_epoch_) == (head.n_epochs_, head.best_epoch_)
    # the package-level dispatch knows the type
    record2, tensors2 = any_head_to_record(head)
    assert isinstance(any_head_from_record(record2, tensors2), MLPHead)


def test_record_shape_and_content_errors():
    X, y = _rings(n=300)
    record, tensors = mlp_head_to_record(MLPHead(**SMALL).fit(X, y))
    bad = {**tensors, "W2": tensors["W2"][:, :2]}
    with pytest.raises(
        DataError,
        match=r"MLP head weights have shapes W1 \(6, 32\), b1 \(32,\), W2 \(32, 2\), b2 \(3,\); "
        r"expected \(d, h\), \(h,\), \(h, 3\), \(3,\) for a multiclass head with 3 labels",
    ):
        mlp_head_from_record(record, bad)
    with pytest.raises(DataError, match="head weights lack the tensor 'b1'"):
        mlp_head_from_record(record, {k: v for k, v in tensors.items() if k != "b1"})
    with pytest.raises(DataError, match=r"and hidden=16"):
        mlp_head_from_record({**record, "params": {**record["params"], "hidden": 16}}, tensors)
    with pytest.raises(DataError, match="expected 'mlp'"):
        mlp_head_from_record({**record, "type": "linear"}, tensors)
    with pytest.raises(DataError, match="bad parameter: dropout must be a number in"):
        mlp_head_from_record({**record, "params": {**record["params"], "dropout": 2}}, tensors)
    nan = {**tensors, "b2": np.full(3, np.nan, dtype=np.float32)}
    with pytest.raises(DataError, match="tensor 'b2' holds non-finite values"):
        mlp_head_from_record(record, nan)


# -- errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kind": "regression"}, "head kind must be one of multiclass, binary, multilabel"),
        ({"hidden": 0}, "hidden must be an integer >= 1, got 0"),
        ({"hidden": 2.5}, "hidden must be an integer >= 1, got 2.5"),
        ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\), got 1.0"),
        ({"validation_fraction": 1}, r"validation_fraction must be a number in \[0, 1\), got 1"),
        ({"class_weight": "heavy"}, "class_weight must be None, 'balanced' or a dict"),
        ({"random_state": -1}, r"random_state must be None or an integer in \[0, 2\*\*63\)"),
    ],
)
def test_bad_params(params, message):
    with pytest.raises(ConfigError, match=message):
        MLPHead(**params).fit(np.zeros((4, 2)), ["a", "b", "a", "b"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_epochs": 0}, "max_epochs must be an integer >= 1, got 0"),
        ({"patience": True}, "patience must be an integer >= 1, got True"),
        ({"batch_size": -4}, "batch_size must be an integer >= 1, got -4"),
        ({"lr": 0}, "lr must be a positive finite number, got 0"),
        ({"weight_decay": -1e-3}, "weight_decay must be a finite number >= 0, got -0.001"),
    ],
)
def test_bad_training_settings(params, message):
    with pytest.raises(ConfigError, match=message):
        MLPTraining(**params)


def test_training_must_be_training_settings():
    with pytest.raises(ConfigError, match=r"training must be None or an MLPTraining, got \{'lr'"):
        MLPHead(training={"lr": 0.1}).fit(np.zeros((4, 2)), ["a", "b", "a", "b"])


def test_record_keeps_training_settings_flat():
    X, y = _rings(n=300)
    head = MLPHead(training=MLPTraining(lr=2e-3, max_epochs=5), random_state=0).fit(X, y)
    record, tensors = mlp_head_to_record(head)
    assert list(record["params"]) == sorted(record["params"])
    assert {"lr": 2e-3, "max_epochs": 5, "patience": 10, "batch_size": 256}.items() <= (
        record["params"].items()
    )
    assert "training" not in record["params"]
    again = mlp_head_from_record(record, tensors)
    assert again.training == MLPTraining(lr=2e-3, max_epochs=5)
    with pytest.raises(DataError, match="bad parameter: max_epochs must be an integer >= 1"):
        mlp_head_from_record({**record, "params": {**record["params"], "max_epochs": 0}}, tensors)


def test_data_errors():
    with pytest.raises(DataError, match=r"labels have a single class \('a'\)"):
        MLPHead().fit(np.zeros((3, 2)), ["a", "a", "a"])
    with pytest.raises(DataError, match="a binary head needs exactly 2 classes, got 3"):
        MLPHead(kind="binary").fit(np.zeros((3, 2)), ["a", "b", "c"])
    with pytest.raises(DataError, match="X has 3 rows but y has 2 labels"):
        MLPHead().fit(np.zeros((3, 2)), ["a", "b"])
    with pytest.raises(DataError, match="multilabel target #0 must be a list of labels, got str"):
        MLPHead(kind="multilabel").fit(np.zeros((2, 2)), ["a", "b"])
    with pytest.raises(DataError, match="X_val has 2 rows but y_val has 1 labels"):
        MLPHead().fit(np.zeros((2, 2)), ["a", "b"], X_val=np.zeros((2, 2)), y_val=["a"])
    X, y = _rings(n=200)
    head = MLPHead(**SMALL).fit(X, y)
    with pytest.raises(DataError, match="X has 5 features but the head was fitted on 6"):
        head.predict(np.zeros((1, 5)))


def test_diverging_training_names_lr():
    X, y = _xor(n=200)
    X = X * 1e30
    with pytest.raises(
        ConfigError,
        match=r"MLP head training diverged in epoch \d+ \(loss \S+\); lower lr \(now 1e\+30\)",
    ):
        MLPHead(
            kind="binary",
            training=MLPTraining(lr=1e30, max_epochs=60),
            dropout=0.0,
            **{k: v for k, v in SMALL.items() if k != "training"},
        ).fit(X, y)


# -- torch is needed to train, not to predict --------------------------------------


def test_inference_works_without_torch(monkeypatch):
    X, y = _rings(n=300)
    head = MLPHead(**SMALL).fit(X, y)
    expected = head.predict_proba(X)
    record, tensors = mlp_head_to_record(head)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    np.testing.assert_array_equal(head.predict_proba(X), expected)
    again = mlp_head_from_record(record, tensors)
    np.testing.assert_array_equal(again.predict(X), head.predict(X))
    with pytest.raises(MissingDependencyError, match=r"'torch' is not installed.*transformers"):
        MLPHead(**SMALL).fit(X, y)


def test_loading_and_predicting_never_imports_torch(tmp_path):
    X, y = _xor(n=300)
    head = MLPHead(kind="binary", **SMALL).fit(X, y)
    record, tensors = mlp_head_to_record(head)
    (tmp_path / "record.json").write_text(json.dumps(record))
    np.savez(tmp_path / "tensors.npz", X=X, **tensors)
    np.save(tmp_path / "expected.npy", head.predict_proba(X))
    script = f"""
import json, sys
import numpy as np
from manyheads.heads.mlp import mlp_head_from_record
data = dict(np.load({str(tmp_path / "tensors.npz")!r}))
X = data.pop("X")
head = mlp_head_from_record(json.load(open({str(tmp_path / "record.json")!r})), data)
np.testing.assert_array_equal(head.predict_proba(X), np.load({str(tmp_path / "expected.npy")!r}))
assert "torch" not in sys.modules, "torch was imported"
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
