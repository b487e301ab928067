"""L2-regularised logistic regression solved with L-BFGS in float32.

The objective is scikit-learn's (``LogisticRegression``, lbfgs):

    (1 / sum(w)) * sum_i w_i * loss_i  +  ||W||^2 / (2 * C * sum(w))

with an unpenalised intercept, so the solution is the one scikit-learn finds.
It is written here because heads must train in well under two seconds on
10,000 embeddings: float32 matrix products, in-place softmax, no one-hot
matrix, one L-BFGS run for all labels of a multilabel head, and warm starts
(a refit on more data starts from the previous solution).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from threadpoolctl import ThreadpoolController


@dataclass
class LinearSolution:
    coef: np.ndarray  # (outputs, d)
    intercept: np.ndarray  # (outputs,)
    n_iter: int

    def packed(self) -> np.ndarray:
        return np.concatenate([self.coef.T.ravel(), self.intercept]).astype(np.float64)


def fit_softmax(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    C: float,
    sample_weight: np.ndarray | None = None,
    warm_start: LinearSolution | None = None,
    max_iter: int = 500,
    tol: float = 1e-4,
    prior: LinearSolution | None = None,
) -> LinearSolution:
    """Multinomial logistic regression; ``y`` holds class indices, or is an ``(n, K)``
    matrix of target probabilities (soft targets: the cross-entropy against each row's
    distribution, as in distillation). ``prior``: the weights and intercepts the L2
    penalty pulls towards (default: the weights towards zero, the intercepts free)."""
    X, XT, sw, total = _prepare(X, sample_weight)
    n, d = X.shape
    K = n_classes
    rows = np.arange(n)
    scale = (sw / total).astype(np.float32)
    lam = 1.0 / (C * total)
    Q = np.asarray(y, dtype=np.float32) if np.ndim(y) == 2 else None
    center = _center(prior, K, d)

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        W64, Z = _logits(X, w, d, K)
        Z -= Z.max(axis=1, keepdims=True)
        z_true = np.einsum("ij,ij->i", Z, Q) if Q is not None else Z[rows, y].copy()
        np.exp(Z, out=Z)
        s = Z.sum(axis=1)
        loss = float(np.dot(scale, np.log(s) - z_true))
        Z /= s[:, None]
        if Q is not None:
            Z -= Q
        else:
            Z[rows, y] -= 1.0
        Z *= scale[:, None]
        return _penalised(w, W64, XT, Z, loss, lam, center)

    return _run(objective, d, K, warm_start, max_iter, tol)


def fit_sigmoid(
    X: np.ndarray,
    Y: np.ndarray,
    *,
    C: float,
    sample_weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
    warm_start: LinearSolution | None = None,
    max_iter: int = 500,
    tol: float = 1e-4,
    prior: LinearSolution | None = None,
) -> LinearSolution:
    """Independent binary logistic regressions, one per column of the 0/1 matrix ``Y``;
    ``prior`` as in :func:`fit_softmax`.

    The columns' problems share nothing but ``X``: a problem of more than
    :data:`BLOCK_PARAMS` weights (hundreds of labels on wide sparse vectors) is solved
    a block of columns at a time, to the same gradient tolerance. L-BFGS then keeps its
    history for fewer variables and each block stops when it has converged, instead of
    every label stepping until the slowest one has."""
    X, XT, sw, total = _prepare(X, sample_weight)
    d, K = X.shape[1], Y.shape[1]
    Yf = np.asarray(Y, dtype=np.float32)
    size = max(1, BLOCK_PARAMS // (d + 1))
    if size >= K:
        return _sigmoid(X, XT, sw, total, Yf, pos_weight, C, warm_start, max_iter, tol, prior)
    parts = []
    for start in range(0, K, size):
        cols = slice(start, min(K, start + size))
        parts.append(
            _sigmoid(
                X, XT, sw, total, Yf[:, cols],
                None if pos_weight is None else pos_weight[cols],
                C, _columns(warm_start, cols), max_iter, tol, _columns(prior, cols),
            )
        )  # fmt: skip
    return LinearSolution(
        np.concatenate([p.coef for p in parts]),
        np.concatenate([p.intercept for p in parts]),
        max(p.n_iter for p in parts),
    )


BLOCK_PARAMS = 1 << 20
"""The most weights :func:`fit_sigmoid` solves for at once."""


def _columns(solution: LinearSolution | None, cols: slice) -> LinearSolution | None:
    if solution is None:
        return None
    return LinearSolution(solution.coef[cols], solution.intercept[cols], solution.n_iter)


def _sigmoid(
    X: Any,
    XT: Any,
    sw: np.ndarray,
    total: float,
    Yf: np.ndarray,
    pos_weight: np.ndarray | None,
    C: float,
    warm_start: LinearSolution | None,
    max_iter: int,
    tol: float,
    prior: LinearSolution | None,
) -> LinearSolution:
    d, K = X.shape[1], Yf.shape[1]
    weights = np.repeat((sw / total)[:, None], K, axis=1).astype(np.float32)
    if pos_weight is not None:
        weights *= np.where(Yf > 0, pos_weight[None, :].astype(np.float32), np.float32(1.0))
    lam = 1.0 / (C * total)
    center = _center(prior, K, d)

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        W64, Z = _logits(X, w, d, K)
        # loss = softplus(z) - y * z ; gradient = sigmoid(z) - y
        loss = float((weights * (np.logaddexp(0.0, Z) - Yf * Z)).sum())
        G = np.negative(Z, out=Z)
        np.exp(G, out=G)
        G += 1.0
        np.reciprocal(G, out=G)
        G -= Yf
        G *= weights
        return _penalised(w, W64, XT, G, loss, lam, center)

    return _run(objective, d, K, warm_start, max_iter, tol)


def _logits(X: Any, w: np.ndarray, d: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """The weights as a (d, K) float64 view of ``w`` and the float32 logits ``X W + b``."""
    W64 = w[: d * K].reshape(d, K)
    Z = np.asarray(X @ W64.astype(np.float32))
    Z += w[d * K :].astype(np.float32)
    return W64, Z


def _center(prior: LinearSolution | None, K: int, d: int) -> np.ndarray | None:
    """The prior packed as the solver's vector (weights as (d, K), then intercepts)."""
    if prior is None:
        return None
    if prior.coef.shape != (K, d) or prior.intercept.shape != (K,):
        raise ValueError(f"prior weights must be {K} x {d}, got {prior.coef.shape}")
    return prior.packed()


def _penalised(
    w: np.ndarray,
    W64: np.ndarray,
    XT: Any,
    G: np.ndarray,
    loss: float,
    lam: float,
    center: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """The objective and its gradient: ``loss`` plus the L2 penalty on the weights (not
    the intercepts); with a prior (``center``), on the distance of weights and
    intercepts from it; ``G``: the loss's gradient in the logits."""
    d, K = W64.shape
    grad = np.empty_like(w)
    if center is None:
        grad[: d * K] = (XT @ G + lam * W64).ravel()
        grad[d * K :] = G.sum(axis=0)
        flat = w[: d * K]
        return loss + 0.5 * lam * float(np.dot(flat, flat)), grad
    off = w - center
    grad[: d * K] = (XT @ G).ravel() + lam * off[: d * K]
    grad[d * K :] = G.sum(axis=0) + lam * off[d * K :]
    return loss + 0.5 * lam * float(np.dot(off, off)), grad


def _prepare(
    X: np.ndarray, sample_weight: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """float32 X, its transpose (both contiguous, or CSR when X is sparse), float32
    sample weights and their sum."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float32)
        XT = sp.csr_matrix(X.T)
    else:
        X = np.ascontiguousarray(X, dtype=np.float32)
        XT = np.ascontiguousarray(X.T)
    n = X.shape[0]
    sw = np.ones(n, dtype=np.float32) if sample_weight is None else sample_weight.astype(np.float32)
    return X, XT, sw, float(sw.sum())


def _run(objective, d: int, K: int, warm: LinearSolution | None, max_iter: int, tol: float):  # type: ignore[no-untyped-def]
    gtol = tol
    if warm is not None and warm.coef.shape == (K, d):
        w0 = warm.packed()
        # a warm start near the optimum (the previous C of a path) must still make
        # progress: ask for a gradient at most half the initial one
        with np.errstate(over="ignore"):
            _, g0 = objective(w0)
        gtol = min(tol, 0.5 * float(np.abs(g0).max()))
    else:
        w0 = np.zeros(d * K + K)
    with np.errstate(over="ignore"), _single_threaded_optimizer_blas():
        res = minimize(
            objective,
            w0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iter, "gtol": gtol},
        )
    coef = res.x[: d * K].reshape(d, K).T.astype(np.float32)
    intercept = res.x[d * K :].astype(np.float32)
    return LinearSolution(np.ascontiguousarray(coef), intercept, int(res.nit))


@functools.lru_cache(maxsize=1)
def _optimizer_blas() -> list[Any]:
    """BLAS pools other than numpy's (scipy wheels bundle their own OpenBLAS)."""
    try:
        libs = ThreadpoolController().select(user_api="blas").lib_controllers
    except Exception:  # threadpoolctl inspects loaded libraries; never fail a fit on it
        return []
    return [lib for lib in libs if "numpy" not in str(lib.filepath)]


@contextlib.contextmanager
def _single_threaded_optimizer_blas() -> Iterator[None]:
    """Run L-BFGS's own BLAS on one thread while numpy's matrix products use all cores.

    With two OpenBLAS thread pools (numpy's and scipy's) spinning on the same
    cores, each L-BFGS iteration costs about three times as much.
    """
    global _blas_depth, _blas_before
    libs = _optimizer_blas()
    with _blas_lock:  # fits may run in threads: the first in sets, the last out restores
        if _blas_depth == 0:
            _blas_before = [lib.num_threads for lib in libs]
            for lib in libs:
                lib.set_num_threads(1)
        _blas_depth += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0:
                for lib, n in zip(libs, _blas_before, strict=True):
                    lib.set_num_threads(n)


_blas_lock = threading.Lock()
_blas_depth = 0
_blas_before: list[int] = []
