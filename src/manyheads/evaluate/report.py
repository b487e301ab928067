"""An evaluation as something to look at: ``report.json`` and one self-contained
``report.html`` (every figure embedded as a PNG) with, for each head:

- single-label heads: the confusion matrix (at most :data:`MATRIX_LABELS` labels; above
  that, the most frequent confusions as bars), F1 per label, the reliability diagram
  of the top-label confidence before and after temperature scaling, and histograms of
  that confidence for right and wrong answers;
- multilabel and hierarchical heads: F1 per label (hierarchical: and per level), the
  reliability diagram of every (text, label) probability before and after temperature
  scaling, and histograms of the probabilities of labels a text has and has not.

Figures are drawn with matplotlib (the ``report`` extra), off screen.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_text
from ..errors import require
from ..heads.kinds import Kind
from .metrics import per_label_f1

__all__ = ["MATRIX_LABELS", "HeadOutcome", "figure_png", "html_page", "write_report"]

MATRIX_LABELS = 20  # a confusion matrix up to this many labels; the top confusions above
TOP_CONFUSIONS = 15
F1_BARS = 40  # per-label F1 of at most this many labels (the most frequent)
BINS = 10


@dataclass(frozen=True)
class HeadOutcome:
    """What one head answered on labelled rows: its ``kind``, ``classes``, ``target``
    (class indices, -1 for a label it never saw; multilabel: a 0/1 matrix), ``picked``
    (its decisions, the same shapes), ``proba`` (after temperature scaling) and the
    ``temperature``."""

    kind: Kind
    classes: list[Any]
    target: np.ndarray
    picked: np.ndarray
    proba: np.ndarray
    temperature: float

    def uncalibrated(self) -> np.ndarray:
        """The probabilities before temperature scaling (the logits times the
        temperature, back through softmax / sigmoid)."""
        p = np.clip(self.proba.astype(np.float64), 1e-12, 1 - 1e-12)
        if self.kind.exclusive:  # softmax
            z = np.log(p) * self.temperature
            z -= z.max(axis=1, keepdims=True)
            e = np.exp(z)
            return e / e.sum(axis=1, keepdims=True)
        z = np.log(p) - np.log1p(-p)
        return 1.0 / (1.0 + np.exp(-z * self.temperature))


def _confidence(outcome: HeadOutcome, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(probability, whether it was right)`` pairs the reliability diagram bins: the
    top label of a single-label head, every (text, label) of a multilabel head."""
    return outcome.kind.reliability_pairs(proba, outcome.target)


def _reliability(confidence: np.ndarray, right: np.ndarray) -> list[dict[str, float]]:
    """Per bin of confidence: its mean confidence, the share right, the count."""
    edges = np.linspace(0.0, 1.0, BINS + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, BINS - 1)
    out = []
    for b in range(BINS):
        mask = which == b
        if mask.any():
            out.append(
                {
                    "confidence": float(confidence[mask].mean()),
                    "accuracy": float(right[mask].mean()),
                    "n": int(mask.sum()),
                }
            )
    return out


def figure_png(fig: Any) -> str:
    """A matplotlib figure as base64 PNG (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    require("matplotlib.pyplot", "report").close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figures(
    name: str,
    outcome: HeadOutcome,
    f1: dict[str, float],
    metrics: dict[str, Any],
    reliability: dict[str, list[dict[str, float]]],
) -> list[dict[str, str]]:
    """The head's figures: ``{"id", "title", "png"}`` each (``reliability``: the bins
    before and after temperature scaling)."""
    plt = require("matplotlib.pyplot", "report")
    figures = []
    classes = [str(c) for c in outcome.classes]
    single = not outcome.kind.is_set
    if single and len(classes) <= MATRIX_LABELS:
        from sklearn.metrics import ConfusionMatrixDisplay

        seen = outcome.target >= 0
        size = 2.5 + 0.35 * len(classes)
        fig, ax = plt.subplots(figsize=(size, size))
        ConfusionMatrixDisplay.from_predictions(
            outcome.target[seen], outcome.picked[seen], labels=list(range(len(classes))),
            display_labels=classes, ax=ax, colorbar=False, xticks_rotation="vertical",
        )  # fmt: skip
        ax.set_title(f"{name}: confusion matrix")
        figures.append({"id": "confusion", "title": "Confusion matrix", "png": figure_png(fig)})
    elif single:
        pairs = Counter(
            (classes[t] if t >= 0 else "(unseen)", classes[p])
            for t, p in zip(outcome.target.tolist(), outcome.picked.tolist(), strict=True)
            if t != p
        ).most_common(TOP_CONFUSIONS)
        fig, ax = plt.subplots(figsize=(7, 0.8 + 0.3 * max(1, len(pairs))))
        ax.barh([f"{t} → {p}" for (t, p), _ in pairs][::-1], [n for _, n in pairs][::-1])
        ax.set_xlabel("texts")
        ax.set_title(f"{name}: the most frequent confusions (true → answered)")
        figures.append({"id": "confusions", "title": "Top confusions", "png": figure_png(fig)})
    support = (
        outcome.target.sum(axis=0)
        if not single
        else np.bincount(outcome.target[outcome.target >= 0], minlength=len(classes))
    )
    shown = sorted(range(len(classes)), key=lambda i: -support[i])[:F1_BARS]
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.25 * len(shown)))
    ax.barh([classes[i] for i in shown][::-1], [f1[classes[i]] for i in shown][::-1])
    ax.set_xlim(0, 1)
    ax.set_xlabel("F1")
    more = f" (the {len(shown)} most frequent)" if len(shown) < len(classes) else ""
    ax.set_title(f"{name}: F1 per label{more}")
    figures.append({"id": "f1", "title": "F1 per label", "png": figure_png(fig)})
    levels = metrics.get("f1_per_level") or {}
    if levels:  # hierarchical heads
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.bar([f"level {k}" for k in levels], list(levels.values()))
        ax.set_ylim(0, 1)
        ax.set_ylabel("micro F1")
        ax.set_title(f"{name}: F1 per level (hierarchical F1 {metrics['hierarchical_f1']:.3f})")
        figures.append({"id": "levels", "title": "F1 per level", "png": figure_png(fig)})
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
    for label, bins in (("before scaling", reliability["before"]), ("after", reliability["after"])):
        ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o-", label=label)
    ax.set_xlabel("confidence" if single else "probability")
    ax.set_ylabel("share right" if single else "share with the label")
    ax.set_title(f"{name}: reliability (temperature {outcome.temperature:.3g})")
    ax.legend()
    figures.append({"id": "reliability", "title": "Reliability diagram", "png": figure_png(fig)})
    confidence, right = _confidence(outcome, outcome.proba)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = ("right", "wrong") if single else ("label present", "label absent")
    ax.hist([confidence[right], confidence[~right]], bins=20, range=(0, 1), label=names)
    ax.set_yscale("log")
    ax.set_xlabel("top-label confidence" if single else "probability")
    ax.set_title(f"{name}: scores")
    ax.legend()
    figures.append({"id": "scores", "title": "Score histogram", "png": figure_png(fig)})
    return figures


def html_page(title: str, sections: list[str]) -> str:
    """One self-contained HTML page of ``sections`` (HTML fragments) under ``title``."""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "figure{display:inline-block;vertical-align:top;margin:0 1em 1em 0}"
        "img{max-width:100%}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def write_report(
    folder: str | os.PathLike[str],
    metrics: dict[str, dict[str, Any]],
    outcomes: dict[str, HeadOutcome],
    *,
    title: str = "manyheads evaluation",
) -> Path:
    """Write ``report.json`` (the metrics, F1 per label, reliability bins before and
    after temperature scaling) and ``report.html`` into ``folder``; the page's path."""
    require("matplotlib", "report").use("Agg")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"title": title, "heads": {}}
    sections = []
    for name in metrics:
        if name in outcomes:
            sections.append(_section(doc, name, outcomes[name], metrics[name]))
            continue
        # a tree head: its ranking metrics, no figures over every label
        doc["heads"][name] = {"metrics": metrics[name], "figures": []}
        kind = str(metrics[name].get("kind", ""))
        sections.append(
            f'<section id="head-{html.escape(name)}"><h2>{html.escape(name)} '
            f"({html.escape(kind)})</h2><table>{_cells(metrics[name])}</table></section>"
        )
    atomic_write_text(folder / "report.json", json.dumps(doc, indent=1) + "\n")
    atomic_write_text(folder / "report.html", html_page(title, sections))
    return folder / "report.html"


def _cells(metrics: dict[str, Any]) -> str:
    shown = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{v:.4g}</td></tr>" for k, v in shown.items())


def _section(doc: dict[str, Any], name: str, outcome: HeadOutcome, metrics: dict) -> str:
    """One head's part of the report: ``doc``'s entry and its HTML section."""
    f1 = per_label_f1(outcome.kind, outcome.target, outcome.picked, outcome.classes)
    reliability = {
        "before": _reliability(*_confidence(outcome, outcome.uncalibrated())),
        "after": _reliability(*_confidence(outcome, outcome.proba)),
    }
    figures = _figures(name, outcome, f1, metrics, reliability)
    doc["heads"][name] = {
        "metrics": metrics,
        "f1_per_label": f1,
        "reliability": reliability,
        "figures": [f["id"] for f in figures],
    }
    images = "".join(
        f'<figure data-head="{html.escape(name)}" data-figure="{f["id"]}">'
        f'<img alt="{html.escape(name)}: {html.escape(f["title"])}" '
        f'src="data:image/png;base64,{f["png"]}"><figcaption>{html.escape(f["title"])}'
        "</figcaption></figure>"
        for f in figures
    )
    return (
        f'<section id="head-{html.escape(name)}"><h2>{html.escape(name)} '
        f"({html.escape(outcome.kind)})</h2><table>{_cells(metrics)}</table>{images}</section>"
    )
