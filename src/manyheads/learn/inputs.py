"""Where a head's texts lie: the inputs' half of its drift reference.

A head's answers can stay put while its texts move, so a head's reference also keeps
(``reference["inputs"]``, on a trunk with a part that maps texts by meaning)
``INPUT_COMPONENTS`` principal axes of that part's vectors, fitted on one half of the
head's rows (at most ``INPUT_ROWS`` of them, split by group), and, measured on the
other half, the mean, the variance along each axis and the design effect of the mean
along them. A window's vectors, projected on the axes, are compared with it by
Hotelling's T² (:func:`input_t2`); :mod:`manyheads.learn.drift` puts it in each head's
row of the drift table.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trunks.base import dense_rows
from .design import kept_design_effect, mean_design_effect

__all__ = [
    "INPUT_COMPONENTS",
    "INPUT_ROWS",
    "InputTally",
    "Inputs",
    "input_profile",
    "input_t2",
    "inputs_of",
]

INPUT_COMPONENTS = 16  # principal axes of the inputs' reference
INPUT_ROWS = 10_000  # rows of the inputs' reference, at most (a seeded sample)
_MIN_INPUT_ROWS = 50  # fewer rows keep no inputs' reference
_VERSION = 1


def _block(X: Any, columns: tuple[int, int], rows: np.ndarray | None = None) -> np.ndarray:
    """The columns ``[start, stop)`` of ``X``'s rows (dense or CSR), dense float64."""
    part = X[:, columns[0] : columns[1]] if rows is None else X[rows][:, columns[0] : columns[1]]
    return dense_rows(part).astype(np.float64)


def _short(values: np.ndarray) -> list[float]:
    return [float(f"{v:.6g}") for v in np.asarray(values, dtype=np.float64).ravel()]


def _halves(n: int, groups: Sequence[Any] | None, seed: int) -> np.ndarray:
    """Which half each of ``n`` rows is in (0 or 1): by a hash of its group, so a
    group's rows stay together, else at random."""
    if groups is not None:
        side = np.array([zlib.crc32(f"{seed}:{g}".encode()) % 2 for g in groups])
        if min(int((side == 0).sum()), int((side == 1).sum())) >= _MIN_INPUT_ROWS // 2:
            return side
    return np.random.default_rng(seed).permutation(n) % 2


def input_profile(
    vectors: Any,
    columns: tuple[int, int] | None,
    groups: Sequence[Any] | None = None,
    seed: int = 0,
) -> dict[str, Any] | None:
    """The inputs' reference (see the module's text) from the trunk vectors of a head's
    rows (dense or CSR), of which ``columns`` (``[start, stop)``) are the part that
    maps texts by meaning; ``groups``: the rows' groups. The axes are fitted on one
    half of the rows (by group), the mean, the variances and the design effect
    measured on the other: along axes fitted on the same rows, their spread and their
    clustering read larger than new texts show. None without such a part or with
    fewer than 50 rows. Plain JSON: ``(INPUT_COMPONENTS + 1) x`` the part's width
    numbers."""
    if columns is None:
        return None
    n_all = int(vectors.shape[0])
    rows = np.arange(n_all)
    if n_all > INPUT_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(n_all, INPUT_ROWS, replace=False))
    if len(rows) < _MIN_INPUT_ROWS or columns[1] > vectors.shape[1]:
        return None
    V = _block(vectors, columns, rows)
    at = None if groups is None or len(groups) != n_all else [groups[int(i)] for i in rows]
    side = _halves(len(rows), at, seed)
    fit, held = V[side == 0], V[side == 1]
    # the covariance's eigenvectors (a d x d problem, whatever the rows), largest first
    centred = fit - fit.mean(axis=0)
    k = min(INPUT_COMPONENTS, len(fit) - 1, len(held) - 1, V.shape[1])
    # numpy's LAPACK shares numpy's BLAS threads: scipy's would wake a second pool of
    # threads against them, ten times slower on a few cores for this small problem
    _, eigenvectors = np.linalg.eigh(centred.T @ centred / max(len(fit) - 1, 1))
    axes = eigenvectors[:, ::-1][:, :k].T  # ascending, so reversed: the k largest
    center = held.mean(axis=0)
    Z = (held - center) @ axes.T
    variances = Z.var(axis=0, ddof=1)
    keep = variances > 1e-9 * float(variances.max(initial=0.0))
    axes, variances, Z = axes[keep], variances[keep], Z[:, keep]
    if not len(variances):
        return None
    deff = 1.0
    if at is not None:
        deff = mean_design_effect(Z, [g for g, h in zip(at, side, strict=True) if h == 1])
    return {
        "version": _VERSION,
        "columns": [int(columns[0]), int(columns[1])],
        "n": len(held),
        "center": _short(center),
        "components": [_short(a) for a in axes],
        "variances": _short(variances),
        "design_effect": round(deff, 4),
    }


@dataclass(frozen=True)
class Inputs:
    """A head's inputs' reference, read (:func:`inputs_of`)."""

    columns: tuple[int, int]
    n: int
    center: np.ndarray
    axes: np.ndarray
    variances: np.ndarray
    design_effect: float

    def project(self, X: Any) -> np.ndarray | None:
        """``X``'s rows on the axes (rows x axes); None when ``X`` lacks the columns."""
        if X is None or X.shape[0] == 0 or X.shape[1] < self.columns[1]:
            return None
        return np.asarray((_block(X, self.columns) - self.center) @ self.axes.T)


def inputs_of(ref: Any) -> Inputs | None:
    """The inputs' reference of a head's reference, read and checked; None when there
    is none or it does not read."""
    found = ref.get("inputs") if isinstance(ref, Mapping) else None
    if not isinstance(found, Mapping) or found.get("version") != _VERSION:
        return None
    try:
        a, b = (int(v) for v in found["columns"])
        center = np.asarray(found["center"], dtype=np.float64)
        axes = np.asarray(found["components"], dtype=np.float64)
        variances = np.asarray(found["variances"], dtype=np.float64)
        n = int(found["n"])
    except (KeyError, TypeError, ValueError):
        return None
    ok = (
        0 <= a < b
        and center.shape == (b - a,)
        and axes.ndim == 2
        and axes.shape[1] == b - a
        and variances.shape == (axes.shape[0],)
        and axes.shape[0] > 0
        and n > 1
        and bool(np.isfinite(axes).all() and np.isfinite(center).all())
        and bool((variances > 0).all() and np.isfinite(variances).all())
    )
    if not ok:
        return None
    return Inputs(
        (a, b), n, center, axes, variances, kept_design_effect(found.get("design_effect"))
    )


@dataclass
class InputTally:
    """The sum of a window's projected vectors and their count."""

    total: np.ndarray | None = None
    n: int = 0

    def add(self, Z: np.ndarray | None) -> None:
        if Z is None or not len(Z):
            return
        self.total = Z.sum(axis=0) if self.total is None else self.total + Z.sum(axis=0)
        self.n += len(Z)


def input_t2(ref: Inputs, t: InputTally, alpha: float) -> tuple[float, float]:
    """``(T², threshold)`` of a window's projected vectors against the reference."""
    from scipy.stats import chi2

    assert t.total is not None
    mean = t.total / t.n
    spread = ref.variances * (1.0 / ref.n + 1.0 / t.n) * ref.design_effect
    return float(np.sum(mean**2 / spread)), float(chi2.ppf(1.0 - alpha, len(ref.variances)))
