"""Per-head part weights for composite trunks (``part_weights="auto"``).

A composite trunk joins its parts' unit vectors with fixed weights. A head may want
another mix (a language head leans on character n-grams, a topic head on meaning),
so it chooses a multiplier for each part on its validation split, the way
``C="auto"`` chooses C: the first part's multiplier stays 1, each other part's is
walked by factors of 2 from 1 (up while the calibrated validation log-loss falls,
else down), at most :data:`STEPS` steps each way. A step is taken only when it
lowers the loss by more than twice its noise (:data:`NOISE` standard errors of the
paired differences of the rows' losses: the same validation rows, scored by the head
before and after the step; the margin a guarded update asks of a new head too). A
gain within that noise is as likely to be a loss on new rows (measured in
bench/RESULTS.md), so the fixed weights stand unless the validation rows show
otherwise. The scaled vectors are brought
back to unit length, so C keeps its meaning. The head is then fitted on the
scaled vectors and the scale is folded into its coefficients
(:func:`fold_columns`): the fused product of the bundle costs nothing more, and
the trunk's vectors stay as they are for every other head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "NOISE",
    "PART_WEIGHTS",
    "STEPS",
    "choose_multipliers",
    "column_scale",
    "fold_columns",
    "scale_columns",
]

PART_WEIGHTS = ("fixed", "auto")
STEPS = 3  # factors of 2: multipliers from 1/8 to 8
NOISE = 2.0  # standard errors of the paired per-row losses a step must gain


def column_scale(
    dims: Sequence[int], weights: Sequence[float], multipliers: np.ndarray
) -> np.ndarray:
    """Per column, the factor that turns the trunk's vectors (parts weighted by
    ``weights``) into vectors with the parts' weights multiplied by ``multipliers``,
    of unit length again."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / np.sqrt((w * w).sum())
    new = w * multipliers
    factor = multipliers / np.sqrt((new * new).sum())
    return np.repeat(factor, np.asarray(dims, dtype=np.int64)).astype(np.float32)


def scale_columns(X: Any, scale: np.ndarray) -> Any:
    """``X`` with each column multiplied by ``scale`` (sparse stays sparse)."""
    if sp.issparse(X):
        out = sp.csr_matrix(X, copy=True)
        out.data *= scale[out.indices]
        return out
    return np.asarray(X, dtype=np.float32) * scale


def fold_columns(coef: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Coefficients fitted on scaled vectors, for the unscaled ones."""
    return (coef * scale).astype(coef.dtype)


def choose_multipliers(
    loss: Callable[[np.ndarray], np.ndarray], parts: int, noise: float = NOISE
) -> tuple[np.ndarray, dict[str, float]]:
    """The multipliers (first part 1) walked part by part, and every multiplier set
    tried with its mean loss. ``loss(multipliers)`` gives each validation row's loss
    (the same rows every call); a step is taken only when it lowers the mean loss by
    more than ``noise`` standard errors of the paired per-row differences (a gain
    smaller than its noise is not evidence of a gain)."""
    best = np.ones(parts)
    tried: dict[str, float] = {}
    rows: dict[str, np.ndarray] = {}

    def score(m: np.ndarray) -> np.ndarray:
        key = ",".join(f"{v:g}" for v in m)
        if key not in rows:
            rows[key] = np.asarray(loss(m), dtype=np.float64).ravel()
            tried[key] = float(rows[key].mean()) if rows[key].size else float("inf")
        return rows[key]

    def gains(new: np.ndarray, old: np.ndarray) -> bool:
        if new.size == 0 or new.shape != old.shape:
            return False
        d = new - old
        se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
        return float(d.mean()) < -noise * se

    best_rows = score(best)
    for p in range(1, parts):
        for factor in (2.0, 0.5):
            moved = False
            for _ in range(STEPS):
                m = best.copy()
                m[p] *= factor
                value = score(m)
                if not gains(value, best_rows):
                    break
                best, best_rows, moved = m, value, True
            if moved:
                break  # improving upwards: no need to look below
    return best, tried
