"""Design effects: how much more the shares (or means) of rows that come in groups
vary from sample to sample than if every row were drawn on its own (Rao and Scott's
corrections of the chi-squared test), as a head's drift reference keeps them
(:mod:`~manyheads.learn.drift`, :mod:`~manyheads.learn.inputs`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "MIN_GROUPS",
    "design_effect",
    "design_effects",
    "kept_design",
    "kept_design_effect",
    "mean_design_effect",
]

MIN_GROUPS = 10  # groups a reference needs before its design effect is measured
_SPREAD_MAX = 2000  # the second-order correction is measured up to this many groups or cells


def kept_design_effect(value: Any) -> float:
    """A kept design effect, or 1 (a number in [1, 50] or nothing)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 1 <= value <= 50
    return float(value) if ok else 1.0


def _kept_spread(value: Any) -> float:
    """A kept design spread, or 0 (a number in [0, 50] or nothing)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 50
    return float(value) if ok else 0.0


def kept_design(reference: Mapping[str, Any], cells: str) -> tuple[float, float]:
    """``(mean, spread)`` of the design effects a drift reference keeps for its
    ``cells`` (``"labels"`` or ``"confidence"``): ``(1, 0)`` where it keeps none, or
    values out of range."""
    found = [reference.get(key) for key in ("design_effect", "design_spread")]
    deff, spread = (f.get(cells) if isinstance(f, Mapping) else None for f in found)
    return kept_design_effect(deff), _kept_spread(spread)


def _group_ids(groups: Sequence[Any]) -> tuple[np.ndarray, int]:
    """Each row's group as an index from 0, and the number of groups."""
    ids: dict[Any, int] = {}
    g = np.array([ids.setdefault(x, len(ids)) for x in groups], dtype=np.int64)
    return g, len(ids)


def design_effects(cells: Sequence[Sequence[str]], groups: Sequence[Any]) -> tuple[float, float]:
    """``(mean, spread)`` of the design effects (Rao and Scott's corrections of the
    chi-squared test) of the shares of the cells each row counts in (``cells[i]``: row
    i's labels, or its confidence bin) when rows come in ``groups``: how much more the
    shares vary from sample to sample than if every row were drawn on its own.

    Rows of one group (a package's descriptions, a user's messages) tend to get the same
    answers, so a window of traffic holds fewer independent answers than rows. The
    chance PSI of grouped rows is a sum ``sum_j lambda_j chi2(1)`` over the eigenvalues
    ``lambda_j`` of the design-effect matrix ``n diag(p)^-1 V`` (``V``: the
    cluster-robust covariance of the shares). ``mean``: their mean (the first-order
    correction; at least 1, at most 50); ``spread``: their squared coefficient of
    variation ``a^2`` (the second-order correction, 0 when every cell varies alike;
    at most 50). With fewer than ``MIN_GROUPS`` groups or two cells: ``(1, 0)``."""
    g, n_groups = _group_ids(groups)
    n_rows = len(g)
    names = sorted({c for row in cells for c in row})
    if n_groups < MIN_GROUPS or len(names) < 2 or n_rows != len(cells):
        return 1.0, 0.0
    col = {c: j for j, c in enumerate(names)}
    y = np.zeros((n_groups, len(names)))  # each group's count in each cell
    for gi, row in zip(g, cells, strict=True):
        for c in row:
            y[gi, col[c]] += 1
    size = np.bincount(g, minlength=n_groups).astype(np.float64)
    p = y.sum(axis=0) / n_rows
    keep = p > 0
    dof = int(keep.sum()) - 1
    # the ratio estimator's deviations of each share under cluster sampling, scaled so
    # that A^T A = n diag(p)^-1/2 V diag(p)^-1/2, whose eigenvalues are the lambda_j
    dev = (y - np.outer(size, p))[:, keep] / np.sqrt(p[keep])
    A = dev * np.sqrt(n_groups / (n_groups - 1) / n_rows)
    total = float((A * A).sum())  # sum of lambda_j (the trace)
    mean = total / dof  # Rao and Scott's mean over the cells, weighted by (1 - p)
    spread = 0.0
    if total > 0 and min(A.shape) <= _SPREAD_MAX:
        gram = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
        squares = float((gram * gram).sum())  # sum of lambda_j^2 (Frobenius norm)
        spread = dof * squares / (total * total) - 1.0
    return float(min(max(mean, 1.0), 50.0)), float(min(max(spread, 0.0), 50.0))


def design_effect(cells: Sequence[Sequence[str]], groups: Sequence[Any]) -> float:
    """The mean design effect of :func:`design_effects` (1: rows vary as if each was
    drawn on its own; at most 50)."""
    return design_effects(cells, groups)[0]


def mean_design_effect(Z: np.ndarray, groups: Sequence[Any]) -> float:
    """The mean design effect of the means of ``Z``'s columns when its rows come in
    ``groups`` (the cluster-robust variance of each mean over its variance with every
    row drawn on its own); 1 with fewer than ``MIN_GROUPS`` groups; at most 50."""
    g, n_groups = _group_ids(groups)
    n = Z.shape[0]
    if n_groups < MIN_GROUPS or n < 2:
        return 1.0
    centred = Z - Z.mean(axis=0)
    sums = np.stack([np.bincount(g, weights=col, minlength=n_groups) for col in centred.T], axis=1)
    clustered = n_groups / (n_groups - 1) * (sums**2).sum(axis=0) / n**2
    iid = centred.var(axis=0, ddof=1) / n
    keep = iid > 0
    if not keep.any():
        return 1.0
    return float(min(max(float(np.mean(clustered[keep] / iid[keep])), 1.0), 50.0))
