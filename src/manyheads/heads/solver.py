"""L2-regularised logistic regression solved with L-BFGS in float32.

The objective is scikit-learn's (``LogisticRegression``, lbfgs):

    (1 / sum(w)) * sum_i w_i * loss_i  +  ||W||^2 / (2 * C * sum(w))

with an unpenalised intercept, so the solution is the one scikit-learn finds.
It is written here because heads must train in well under two seconds on
10,000 embeddings: float32 matrix products, in-place softmax, no one-hot
matrix, one L-BFGS run for all labels of a multilabel head, and warm starts
(a refit on more data starts from the previous solution).

Dense vectors are whitened for the solver (:class:`_Whitening`): L-BFGS then works on
``V`` with ``W = P V`` and the intercepts shifted by the vectors' mean, an exact change of
variables (the same objective, the same optimum, the same stop on the gradient in ``W``)
under which the loss's curvature is about the same in every direction. Sentence and
word vectors share a large mean and a few wide directions; unwhitened, L-BFGS spends
hundreds of steps creeping along the narrow ones at a large ``C``.
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
    whiten: bool = True,
) -> LinearSolution:
    """Multinomial logistic regression; ``y`` holds class indices, or is an ``(n, K)``
    matrix of target probabilities (soft targets: the cross-entropy against each row's
    distribution, as in distillation). ``prior``: the weights and intercepts the L2
    penalty pulls towards (default: the weights towards zero, the intercepts free).
    ``whiten``: solve in whitened variables where the vectors allow it (module docstring)."""
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

    white = _whitening(X, sw, total, K, K * lam) if whiten else None
    return _run(objective, d, K, warm_start, max_iter, tol, white)


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
    whiten: bool = True,
) -> LinearSolution:
    """Independent binary logistic regressions, one per column of the 0/1 matrix ``Y``;
    ``prior`` and ``whiten`` as in :func:`fit_softmax`.

    The columns' problems share nothing but ``X``: a problem of more than
    :data:`BLOCK_PARAMS` weights (hundreds of labels on wide sparse vectors) is solved
    a block of columns at a time, to the same gradient tolerance. L-BFGS then keeps its
    history for fewer variables and each block stops when it has converged, instead of
    every label stepping until the slowest one has."""
    X, XT, sw, total = _prepare(X, sample_weight)
    d, K = X.shape[1], Y.shape[1]
    Yf = np.asarray(Y, dtype=np.float32)
    size = max(1, BLOCK_PARAMS // (d + 1))
    white = _whitening(X, sw, total, K, 4.0 / (C * total)) if whiten else None
    if size >= K:
        return _sigmoid(
            X, XT, sw, total, Yf, pos_weight, C, warm_start, max_iter, tol, prior, white
        )  # fmt: skip
    parts = []
    for start in range(0, K, size):
        cols = slice(start, min(K, start + size))
        parts.append(
            _sigmoid(
                X, XT, sw, total, Yf[:, cols],
                None if pos_weight is None else pos_weight[cols],
                C, _columns(warm_start, cols), max_iter, tol, _columns(prior, cols), white,
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
    white: _Whitening | None,
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

    return _run(objective, d, K, warm_start, max_iter, tol, white)


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


WHITEN_MAX_WIDTH = 1024
"""The widest dense vectors the solver whitens (a ``d x d`` factorisation a fit)."""

_COVARIANCE_ROWS = 8192  # rows centred at a time while the covariance is summed


@dataclass(frozen=True)
class _Whitening:
    """The change of variables ``W = P V``, ``b = b' - mu W``: with ``S + eps I = L L^T``
    (``S`` the vectors' weighted covariance, ``mu`` their mean), ``P = L^-T``, so the
    loss's curvature in ``V`` is about ``P^T S P``, near the identity. The objective
    is evaluated in ``W`` as before; only L-BFGS sees ``V``."""

    mu: np.ndarray  # (d,)
    P: np.ndarray  # (d, d), upper triangular
    L: np.ndarray  # (d, d), lower triangular: V = L^T W

    def to_w(self, v: np.ndarray, d: int, K: int) -> np.ndarray:
        W = self.P @ v[: d * K].reshape(d, K)
        return np.concatenate([W.ravel(), v[d * K :] - self.mu @ W])

    def to_v(self, w: np.ndarray, d: int, K: int) -> np.ndarray:
        W = w[: d * K].reshape(d, K)
        return np.concatenate([(self.L.T @ W).ravel(), w[d * K :] + self.mu @ W])

    def grad_v(self, g: np.ndarray, d: int, K: int) -> np.ndarray:
        gb = g[d * K :]
        gW = g[: d * K].reshape(d, K) - np.outer(self.mu, gb)
        return np.concatenate([(self.P.T @ gW).ravel(), gb])


def _whitening(X: Any, sw: np.ndarray, total: float, K: int, lam: float) -> _Whitening | None:
    """The whitening of dense ``X`` for ``K`` outputs, or None: for sparse vectors, wider
    than :data:`WHITEN_MAX_WIDTH`, or when the covariance (``n d^2``) would cost more
    than about 16 of the solver's steps (``4 n d K`` each: ``d > 64 K``; a head of one or
    a few outputs, whose steps are cheap). ``lam``: the penalty's curvature against the
    loss's at the start (a softmax of ``K`` near-uniform outputs curves ``S / K``, a
    sigmoid ``S / 4``), at least a millionth of the mean variance."""
    n, d = X.shape
    if sp.issparse(X) or d > WHITEN_MAX_WIDTH or n < 2 or d > 64 * K:
        return None
    w = (sw / total).astype(np.float32)
    mu = (w @ X).astype(np.float64)
    S = np.zeros((d, d))
    mu32 = mu.astype(np.float32)
    for start in range(0, n, _COVARIANCE_ROWS):
        part = X[start : start + _COVARIANCE_ROWS] - mu32
        S += (part.T @ (part * w[start : start + _COVARIANCE_ROWS, None])).astype(np.float64)
    eps = max(lam, 1e-6 * float(np.trace(S)) / d, 1e-12)
    S[np.diag_indices(d)] += eps
    try:
        L = np.linalg.cholesky(S)
    except np.linalg.LinAlgError:  # not positive definite after rounding: solve unwhitened
        return None
    P = np.linalg.inv(L).T
    return _Whitening(mu, np.ascontiguousarray(P), L)


def _run(  # type: ignore[no-untyped-def]
    objective,
    d: int,
    K: int,
    warm: LinearSolution | None,
    max_iter: int,
    tol: float,
    white: _Whitening | None = None,
):
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
    if white is None:
        fun, x0, options, stop = objective, w0, {"maxiter": max_iter, "gtol": gtol}, None
    else:
        fun, stop = _whitened(objective, white, d, K, gtol)
        x0, options = white.to_v(w0, d, K), {"maxiter": max_iter, "gtol": 0.0}
    with np.errstate(over="ignore"), _single_threaded_optimizer_blas():
        res = minimize(fun, x0, jac=True, method="L-BFGS-B", options=options, callback=stop)
    x = res.x if white is None else white.to_w(res.x, d, K)
    coef = x[: d * K].reshape(d, K).T.astype(np.float32)
    intercept = x[d * K :].astype(np.float32)
    return LinearSolution(np.ascontiguousarray(coef), intercept, int(res.nit))


def _whitened(objective, white: _Whitening, d: int, K: int, gtol: float):  # type: ignore[no-untyped-def]
    """The objective in whitened variables, and the stop: L-BFGS steps until the
    gradient in the original variables is at most ``gtol`` (the rule unwhitened fits
    stop on), read at the point each step accepted."""
    last: dict[str, Any] = {}

    def fun(v: np.ndarray) -> tuple[float, np.ndarray]:
        loss, g = objective(white.to_w(v, d, K))
        last["v"], last["g"] = v.copy(), float(np.abs(g).max())
        return loss, white.grad_v(g, d, K)

    def stop(intermediate_result: Any) -> None:
        v = last.get("v")
        if v is not None and last["g"] <= gtol and np.array_equal(v, intermediate_result.x):
            raise StopIteration

    return fun, stop


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
