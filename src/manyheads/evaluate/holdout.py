"""Scoring heads on labelled rows: the metrics recorded at training (validation rows)
and those of ``Bundle.evaluate`` / ``manyheads eval`` (held-out rows, where a label
the head never saw counts as an error)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import DataError
from ..heads.targets import encode_targets, known_rows
from .metrics import head_metrics, hierarchical_metrics
from .ranking import ranking_metrics
from .report import HeadOutcome, write_report

__all__ = ["evaluate_heads", "head_scores", "known_only", "outcome"]


def known_only(head: Any, X: Any, labels: Sequence[Any]) -> tuple[Any, list[Any]]:
    """``(X, labels)`` without what ``head`` never saw in training (rows whose single
    label is unseen go; a multilabel row keeps its known labels)."""
    rows, kept = known_rows(head.kind, list(labels), head.classes_.tolist())
    return (X if head.head_kind.is_set else X[rows]), kept


def outcome(head: Any, X: Any, labels: Sequence[Any], *, unseen: bool = False) -> HeadOutcome:
    """What ``head`` answers on ``X`` against ``labels``. ``unseen``: a single label the
    head does not know is the target -1, an error (else every label must be known)."""
    kind = head.head_kind
    proba = head.predict_proba(X)
    classes = head.classes_.tolist()
    picked = kind.decide(proba, head.thresholds_, head.parents_)
    target = encode_targets(
        kind, labels, classes, path_sep=head.path_sep, unseen=-1 if unseen else None
    ).y
    return HeadOutcome(kind, classes, target, picked, proba, float(head.temperature_))


def head_scores(head: Any, X: Any, labels: Sequence[Any], *, unseen: bool = False) -> dict:
    """Accuracy, F1s and ECE of ``head`` on ``X`` / ``labels`` (``unseen``: see
    :func:`outcome`); a tree head's precision, recall and nDCG at 1, 3 and 5."""
    if getattr(head, "extreme", False):
        return _ranked(head, X, labels)
    return _metrics(head, outcome(head, X, labels, unseen=unseen))


def _ranked(head: Any, X: Any, labels: Sequence[Any]) -> dict[str, Any]:
    from ..heads.tree_fit import indicator

    target = indicator(head.kind, list(labels), head.classes_.tolist())
    return ranking_metrics(head.predict_proba(X), target)


def _metrics(head: Any, found: HeadOutcome) -> dict[str, Any]:
    metrics = head_metrics(found.kind, found.target, found.picked, found.proba)
    if head.parents_ is not None and metrics["n"]:  # label paths: hierarchical scores
        metrics |= hierarchical_metrics(found.target, found.picked, head.parents_)
    return metrics


def evaluate_heads(
    heads: Mapping[str, Any],
    X: Any,
    labels: Mapping[str, Sequence[Any]],
    *,
    report: str | os.PathLike[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Metrics of each head on the rows of ``X`` (one embedding for all): labels a
    multiclass / binary head never saw count as errors; a multilabel head is scored on
    the labels it knows; both list the unseen labels (at most 20). ``report``: a folder
    to write the figures into (:func:`~manyheads.evaluate.report.write_report`)."""
    out = {}
    outcomes = {}
    for name, head in heads.items():
        y = list(labels[name])
        if len(y) != X.shape[0]:
            raise DataError(f"head {name!r}: {X.shape[0]} texts but {len(y)} labels")
        kind, classes = head.head_kind, head.classes_.tolist()
        unseen = kind.unseen(y, set(classes), head.path_sep)
        if getattr(head, "extreme", False):  # ranked: an unseen label is never found
            out[name] = {"kind": head.kind, **_ranked(head, X, y)}
            if unseen:
                out[name]["unseen_labels"] = [str(u) for u in unseen[:20]]
            continue
        scored, as_errors = kind.held_out(y, classes)
        found = outcome(head, X, scored, unseen=as_errors)
        metrics = {"kind": head.kind, **_metrics(head, found)}
        if unseen:
            metrics["unseen_labels"] = [str(u) for u in unseen[:20]]
        out[name] = metrics
        outcomes[name] = found
    if report is not None:
        write_report(report, out, outcomes)
    return out
