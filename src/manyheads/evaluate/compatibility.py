"""How alike two sets of features of the same texts are, and which feature extractors
could share one trunk.

- :func:`linear_cka`: linear centred kernel alignment, 1 when one set of features is
  a rotation and scaling of the other, near 0 for unrelated ones;
- :func:`gromov_wasserstein`: the Gromov-Wasserstein discrepancy between the two
  distributions of texts (the POT library, the ``diagnose`` extra), 0 when their
  pairwise distances agree up to one scale;
- :func:`group_teachers`: extractors grouped so that every two in a group are at
  least ``threshold`` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError, require

__all__ = ["GROUP_THRESHOLD", "gromov_wasserstein", "group_teachers", "linear_cka"]

# the CKA every two members of a suggested group reach, by default
GROUP_THRESHOLD = 0.8


def _pair(X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Two feature matrices of the same texts, checked, as float64."""
    out = []
    for name, M in (("X", X), ("Y", Y)):
        M = np.asarray(M.toarray() if hasattr(M, "toarray") else M, dtype=np.float64)
        if M.ndim != 2:
            raise DataError(f"{name} must be a 2-D array (texts × features), got shape {M.shape}")
        if not np.isfinite(M).all():
            raise DataError(f"{name} holds NaN or infinite values")
        out.append(M)
    if out[0].shape[0] != out[1].shape[0]:
        raise DataError(
            f"X and Y must hold the same texts: {out[0].shape[0]} rows and {out[1].shape[0]} rows"
        )
    if out[0].shape[0] < 3:
        raise DataError(f"need at least 3 texts, got {out[0].shape[0]}")
    return out[0], out[1]


def linear_cka(X: Any, Y: Any) -> float:
    """Linear CKA of two feature matrices of the same texts (rows paired):
    ``‖Yᶜᵀ Xᶜ‖²_F / (‖Xᶜᵀ Xᶜ‖_F ‖Yᶜᵀ Yᶜ‖_F)`` with ``Xᶜ``, ``Yᶜ`` centred per
    feature (Kornblith et al., 2019). In [0, 1]; 1 when ``Y`` is ``X`` rotated and
    scaled (any orthogonal map, any width); independent features score about
    ``dim / texts``, not 0, on a finite sample."""
    X, Y = _pair(X, Y)
    X = X - X.mean(axis=0)
    Y = Y - Y.mean(axis=0)
    if X.shape[0] < max(X.shape[1], Y.shape[1]):  # the texts' Gram matrices are smaller
        K, L = X @ X.T, Y @ Y.T
        cross, nx, ny = float((K * L).sum()), np.linalg.norm(K), np.linalg.norm(L)
    else:
        cross = float(np.linalg.norm(Y.T @ X) ** 2)
        nx, ny = np.linalg.norm(X.T @ X), np.linalg.norm(Y.T @ Y)
    if nx == 0 or ny == 0:
        raise DataError(f"{'X' if nx == 0 else 'Y'} is the same vector for every text")
    return float(np.clip(cross / (nx * ny), 0.0, 1.0))


def _distances(M: np.ndarray, name: str) -> np.ndarray:
    from scipy.spatial.distance import pdist, squareform

    d = pdist(M)
    if not d.any():
        raise DataError(f"{name} is the same vector for every text")
    return np.asarray(squareform(d / d.mean()))


def gromov_wasserstein(X: Any, Y: Any, *, max_iter: int = 1000) -> float:
    """The Gromov-Wasserstein discrepancy between two feature matrices of the same texts.

    Each matrix becomes the Euclidean distances between its texts, divided by their
    mean over all pairs of texts (so a scaled copy is the same shape); the texts
    weigh alike on both sides; the result is POT's
    ``ot.gromov.gromov_wasserstein2`` with the square loss: the least mean squared
    difference between pairs' normalised distances over couplings of the two sets of
    texts. The solver is local: it starts from the texts' own pairing (each text
    matched to itself), so the answer is at most that pairing's cost. 0: the two
    extractors place the texts at the same relative distances (a rotation, a
    scaling); it grows as their geometries differ. It compares the two shapes, not
    the pairing: two extractors with the same geometry but unrelated placements of
    each text can still score low, which :func:`linear_cka` (paired) catches. Cost:
    cubic in the texts; keep them to a sample of a few hundred.
    """
    ot = require("ot", "diagnose")
    X, Y = _pair(X, Y)
    n = X.shape[0]
    weights = np.full(n, 1.0 / n)
    value = ot.gromov.gromov_wasserstein2(
        _distances(X, "X"), _distances(Y, "Y"), weights, weights, loss_fun="square_loss",
        G0=np.eye(n) / n, max_iter=max_iter,
    )  # fmt: skip
    return max(0.0, float(value))


def group_teachers(
    names: Sequence[str], similarity: Any, threshold: float = GROUP_THRESHOLD
) -> list[list[str]]:
    """Suggested groups of extractors that could share one trunk: complete linkage on
    ``similarity`` (a symmetric matrix, e.g. :func:`linear_cka` of each pair).

    Starting from one group per name, the two groups whose least similar members are
    the most similar merge, while that least similarity is at least ``threshold``;
    so every two names in a group are at least ``threshold`` alike (no chains of
    merely neighbouring ones). Groups keep the names' order and come in the order
    of their first name; a name alike to none stands alone.
    """
    names = list(names)
    if len(set(names)) != len(names):
        raise ConfigError(f"names must be distinct, got {names}")
    S = np.asarray(similarity, dtype=np.float64)
    if S.shape != (len(names), len(names)):
        raise DataError(f"similarity must be {len(names)} × {len(names)}, got shape {S.shape}")
    if not np.isfinite(S).all() or not np.allclose(S, S.T, atol=1e-6):
        raise DataError("similarity must be a finite, symmetric matrix")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ConfigError(f"threshold must be a number, got {threshold!r}")
    if not 0 < threshold <= 1:
        raise ConfigError(f"threshold must be in (0, 1], got {threshold!r}")
    groups = [[i] for i in range(len(names))]
    while len(groups) > 1:
        best, pair = -np.inf, (0, 0)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                link = S[np.ix_(groups[a], groups[b])].min()
                if link > best:
                    best, pair = link, (a, b)
        if best < threshold:
            break
        a, b = pair
        groups[a] = sorted(groups[a] + groups.pop(b))
    return [[names[i] for i in g] for g in sorted(groups)]
