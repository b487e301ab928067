"""The linear solver: a sigmoid problem too big to solve at once is solved a block of
labels at a time, to the same optimum; dense vectors are whitened for L-BFGS, to the same
optimum and the same stop, in fewer steps."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from manyheads.heads import solver
from manyheads.heads.solver import LinearSolution, fit_sigmoid, fit_softmax


@pytest.fixture
def problem() -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(0)
    X = sp.random(300, 500, density=0.03, format="csr", random_state=1, dtype=np.float32)
    Y = (np.asarray(X @ rng.normal(size=(500, 12))) > 0.2).astype(np.float32)
    return X, Y


def test_blocks_of_labels_reach_the_joint_optimum(problem, monkeypatch):
    X, Y = problem
    rng = np.random.default_rng(2)
    pos = rng.uniform(0.5, 2.0, size=Y.shape[1]).astype(np.float32)
    prior = LinearSolution(
        rng.normal(size=(Y.shape[1], X.shape[1])).astype(np.float32) * 0.01,
        rng.normal(size=Y.shape[1]).astype(np.float32),
        0,
    )
    options = {"C": 2.0, "pos_weight": pos, "prior": prior, "tol": 1e-7, "max_iter": 3000}
    joint = fit_sigmoid(X, Y, **options)
    monkeypatch.setattr(solver, "BLOCK_PARAMS", (X.shape[1] + 1) * 5)  # blocks of 5 labels
    blocks = fit_sigmoid(X, Y, **options)
    assert blocks.coef.shape == joint.coef.shape == (Y.shape[1], X.shape[1])
    np.testing.assert_allclose(blocks.coef, joint.coef, atol=2e-3)
    np.testing.assert_allclose(blocks.intercept, joint.intercept, atol=2e-3)
    # a warm start from the joint solution stays there, block by block
    again = fit_sigmoid(X, Y, **options, warm_start=joint)
    np.testing.assert_allclose(again.coef, joint.coef, atol=2e-3)


def _sentence_like(n: int = 800, d: int = 64, k: int = 12, seed: int = 3):
    """Unit vectors around a large shared mean with a few wide directions, as sentence
    and word vectors are: the problem L-BFGS crawls on unwhitened."""
    rng = np.random.default_rng(seed)
    spread = np.geomspace(1.0, 0.01, d)
    centers = rng.normal(size=(k, d)) * spread * 0.6
    y = rng.integers(0, k, n)
    X = 3.0 * np.ones(d) / np.sqrt(d) + centers[y] + rng.normal(size=(n, d)) * spread * 0.3
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), y


def _proba(X, sol):
    Z = X.astype(np.float64) @ sol.coef.T.astype(np.float64) + sol.intercept
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True)


def _softmax_gradient(X, y, K, sol, C):
    """The objective's largest gradient entry in the original variables."""
    P = _proba(X, sol)
    P[np.arange(len(y)), y] -= 1.0
    P /= len(y)
    gW = X.T.astype(np.float64) @ P + sol.coef.T / (C * len(y))
    return max(np.abs(gW).max(), np.abs(P.sum(axis=0)).max())


@pytest.mark.parametrize("C", [1.0, 1000.0])
def test_whitened_fits_reach_the_same_optimum_in_fewer_steps(C):
    X, y = _sentence_like()
    K = int(y.max()) + 1
    tight = {"C": C, "tol": 1e-9, "max_iter": 20_000}
    plain = fit_softmax(X, y, K, whiten=False, **tight)
    white = fit_softmax(X, y, K, **tight)
    # weights along the narrowest directions are set to float32's precision; the answers
    np.testing.assert_allclose(_proba(X, white), _proba(X, plain), atol=1e-3)
    # the default stop: the gradient in the original variables, whitened or not
    plain = fit_softmax(X, y, K, C=C, whiten=False, max_iter=5000)
    white = fit_softmax(X, y, K, C=C, max_iter=5000)
    assert _softmax_gradient(X, y, K, white, C) <= 1e-4
    assert _softmax_gradient(X, y, K, plain, C) <= 1e-4
    assert white.n_iter < plain.n_iter


def test_whitening_keeps_priors_warm_starts_and_weights():
    X, y = _sentence_like(seed=4)
    K = int(y.max()) + 1
    rng = np.random.default_rng(5)
    prior = LinearSolution(
        rng.normal(size=(K, X.shape[1])).astype(np.float32),
        rng.normal(size=K).astype(np.float32),
        0,
    )
    sw = rng.uniform(0.2, 3.0, size=len(y))
    options = {"C": 50.0, "tol": 1e-9, "max_iter": 20_000, "prior": prior, "sample_weight": sw}
    plain = fit_softmax(X, y, K, whiten=False, **options)
    white = fit_softmax(X, y, K, **options)
    np.testing.assert_allclose(_proba(X, white), _proba(X, plain), atol=1e-3)
    # a warm start at the optimum stays there
    again = fit_softmax(X, y, K, warm_start=white, **options)
    np.testing.assert_allclose(_proba(X, again), _proba(X, white), atol=1e-3)
    # sigmoids too (one column a class)
    Y = np.eye(K, dtype=np.float32)[y]
    sig = {"C": 50.0, "tol": 1e-9, "max_iter": 20_000}
    a, b = fit_sigmoid(X, Y, **sig), fit_sigmoid(X, Y, whiten=False, **sig)
    np.testing.assert_allclose(X @ a.coef.T + a.intercept, X @ b.coef.T + b.intercept, atol=2e-2)


def test_vectors_that_do_not_pay_for_whitening_are_solved_as_before():
    X, y = _sentence_like()
    sw = np.ones(len(y), dtype=np.float32)
    assert solver._whitening(X, sw, len(y), 12, 1e-3) is not None
    wider = np.hstack([X, X])  # 128 wide
    assert solver._whitening(wider, sw, len(y), 2, 1e-3) is not None
    assert solver._whitening(wider, sw, len(y), 1, 1e-3) is None  # d > 64 K: one output
    assert solver._whitening(sp.csr_matrix(X), sw, len(y), 12, 1e-3) is None
    wide = np.zeros((4, solver.WHITEN_MAX_WIDTH + 1), dtype=np.float32)
    assert solver._whitening(wide, np.ones(4, dtype=np.float32), 4.0, 10**6, 1e-3) is None
