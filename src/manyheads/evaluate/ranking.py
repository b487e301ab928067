"""Ranking metrics of a head that answers each text's best labels (a tree head):
precision@k, recall@k and nDCG@k, as the extreme-classification literature reports
them (napkinXC, Omikuji, the XMC repository)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["RANKS", "ranking_metrics"]

RANKS = (1, 3, 5)


def ranking_metrics(proba: Any, target: sp.csr_matrix, ks: Sequence[int] = RANKS) -> dict[str, Any]:
    """``precision@k`` (the share of a text's ``k`` best labels that are right),
    ``recall@k`` (the share of its labels among them) and ``ndcg@k`` (binary gains,
    normalised by the best order of its labels), averaged over the rows of ``target``
    (texts x labels, 0/1; a row without a known label counts as all wrong), and
    ``accuracy`` (the best label right, multiclass; for multilabel: precision@1)."""
    P, T = sp.csr_matrix(proba), sp.csr_matrix(target)
    n = T.shape[0]
    if n == 0:
        return {"n": 0}
    kmax = max(ks)
    hits = np.zeros((n, kmax), dtype=np.float64)
    for i in range(n):
        lo, hi = P.indptr[i], P.indptr[i + 1]
        cols, ps = P.indices[lo:hi], P.data[lo:hi]
        best = cols[np.lexsort((cols, -ps))][:kmax]
        truth = T.indices[T.indptr[i] : T.indptr[i + 1]]
        hits[i, : len(best)] = np.isin(best, truth)
    n_true = np.diff(T.indptr).astype(np.float64)
    gains = 1.0 / np.log2(np.arange(2, kmax + 2))
    out: dict[str, Any] = {"n": int(n), "accuracy": float(hits[:, 0].mean())}
    for k in ks:
        found = hits[:, :k].sum(axis=1)
        ideal = np.array([gains[: min(int(m), k)].sum() for m in n_true])
        dcg = (hits[:, :k] * gains[:k]).sum(axis=1)
        out[f"precision@{k}"] = float(found.mean() / k)
        out[f"recall@{k}"] = float(np.where(n_true > 0, found / np.maximum(n_true, 1), 0).mean())
        out[f"ndcg@{k}"] = float(np.where(ideal > 0, dcg / np.maximum(ideal, 1e-12), 0).mean())
    return out
