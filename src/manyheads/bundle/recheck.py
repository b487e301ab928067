"""An int8 graph's unsure answers, answered again by the float graph kept beside it.

An int8 export (:mod:`manyheads.export`) keeps the float32 graph as well and,
for each head, a margin in log-odds: how far int8 moves that head's decision
statistic on calibration texts (a quantile of the shift, measured at export).
Every text is answered by the int8 graph; a text for which some head's answer
lies closer to its decision boundary than that head's margin (multiclass: the
log-ratio of the top two probabilities; binary: the log-odds distance to the
threshold; multilabel / hierarchical: the smallest such distance over labels)
is run again through the float graph, and its answers on every head are the
float ones. The trunk holds the float graph and the margins as data; what a
head's decision is stays here and in :mod:`manyheads.heads.decode`.
Needs numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..heads.fused import FusedHeads, HeadSpec
from ..trunks.base import Features, TrunkBase
from .answer import saw

__all__ = ["calibrate_margins", "decision_gaps", "shifts", "trunk_probabilities"]

_EPS = 1e-7


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p.astype(np.float64), _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _top_two(proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-proba, axis=1, kind="stable")
    return order[:, 0], order[:, 1]


def decision_gaps(spec: HeadSpec, proba: np.ndarray) -> np.ndarray:
    """Per row, how far (in log-odds) the head's answer lies from changing."""
    thresholded = spec.kind.thresholded(proba)
    if thresholded is None:  # no thresholds: the top two probabilities
        if proba.shape[1] < 2:
            return np.full(len(proba), np.inf)
        a, b = _top_two(proba)
        logp = np.log(np.clip(proba.astype(np.float64), _EPS, 1.0))
        rows = np.arange(len(proba))
        return np.asarray(logp[rows, a] - logp[rows, b])
    assert spec.thresholds is not None
    return np.asarray(np.abs(_logit(thresholded) - _logit(spec.thresholds)).min(axis=1))


def shifts(spec: HeadSpec, proba: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per row, how far the decision statistic of ``proba`` (int8) moved from
    ``reference`` (float32), in log-odds."""
    thresholded, before = spec.kind.thresholded(proba), spec.kind.thresholded(reference)
    if thresholded is None or before is None:  # no thresholds: the top two probabilities
        if proba.shape[1] < 2:
            return np.zeros(len(proba))
        a, b = _top_two(proba)
        rows = np.arange(len(proba))
        lq = np.log(np.clip(proba.astype(np.float64), _EPS, 1.0))
        lp = np.log(np.clip(reference.astype(np.float64), _EPS, 1.0))
        return np.asarray(np.abs((lq[rows, a] - lq[rows, b]) - (lp[rows, a] - lp[rows, b])))
    return np.asarray(np.abs(_logit(thresholded) - _logit(before)).max(axis=1))


def calibrate_margins(
    fused: FusedHeads,
    proba: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    quantile: float,
) -> dict[str, float]:
    """Each head's margin: the ``quantile`` of its shifts between ``proba`` (int8) and
    ``reference`` (float32) on the same calibration texts."""
    return {
        name: float(np.quantile(shifts(fused.specs[name], p, reference[name]), quantile))
        for name, p in proba.items()
        if not fused.specs[name].trees  # a tree head is not in the graph
    }


def _computed(
    trunk: TrunkBase, fused: FusedHeads, texts: list[str], names: Sequence[str]
) -> tuple[dict[str, np.ndarray], Features | None]:
    """The heads ``names`` on ``trunk``'s vectors (and the vectors): those its graph
    holds from the graph, the others (added since it was written) applied here; on a
    trunk that runs on a GPU, the heads' first layer is computed there (only its
    product comes back: no vectors)."""
    if trunk.projects and not fused.searches(names):
        found = trunk.encode_projected(texts, *fused.first_layer(names))
        return fused.from_first_layer(found, names), None
    X, probs = trunk.encode_with_heads(texts, {n: fused.specs[n].digest for n in names})
    rest = [n for n in names if n not in probs]
    if rest:
        probs.update(fused.probabilities(X, rest))
    return {n: probs[n] for n in names}, X


def trunk_probabilities(
    trunk: TrunkBase, fused: FusedHeads, texts: list[str], names: Sequence[str]
) -> dict[str, np.ndarray]:
    """Every head of ``names`` on ``texts`` from one pass of ``trunk``; when the trunk
    keeps a float graph to recheck with, the rows of unsure texts come from that graph.
    A head the margins do not cover (added or changed since the export) decides
    nothing here."""
    probs, X = _computed(trunk, fused, texts, names)
    saw(X)
    twin = trunk.precise_twin()
    if twin is None or not texts:
        return probs
    precise, part = twin
    margins = part.recheck_margins({n: fused.specs[n].digest for n in probs})
    unsure = np.zeros(len(texts), dtype=bool)
    for name, margin in margins.items():
        unsure |= decision_gaps(fused.specs[name], probs[name]) < margin
    rows = np.flatnonzero(unsure)
    if rows.size:
        again, _ = _computed(precise, fused, [texts[int(i)] for i in rows], names)
        for name in probs:
            probs[name] = probs[name].copy()
            probs[name][rows] = again[name]
    return probs
