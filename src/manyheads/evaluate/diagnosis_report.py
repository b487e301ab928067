"""A diagnosis as something to look at: ``report.json`` (the diagnosis as data) and
one self-contained ``report.html`` beside it, drawn the way an evaluation's report is
(:mod:`manyheads.evaluate.report`, matplotlib off screen, the ``report`` extra):

- trunks: per task, each trunk's probe accuracy, kNN accuracy and discordance as bars,
  with the commonest label's share (what always answering it scores) and the
  discordance's chance level (0.5) marked, and the table of scores, best trunk first;
- teachers: the CKA and Gromov-Wasserstein matrices as heat maps, and the suggested
  groups.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_text
from ..errors import require
from ..heads.kinds import kind_of
from .diagnosis import TeacherDiagnosis, TrunkDiagnosis
from .report import figure_png, html_page

__all__ = ["write_diagnosis_report"]

_SCORES = (("probe", "probe accuracy"), ("knn", "kNN accuracy"), ("discordance", "discordance"))


def _img(alt: str, png: str, caption: str) -> str:
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _trunk_sections(diagnosis: TrunkDiagnosis) -> list[str]:
    plt = require("matplotlib.pyplot", "report")
    sections = [
        f"<p>{diagnosis.n} rows ({diagnosis.n_train} to fit the probe and fitted trunk "
        f"parts, {diagnosis.n_test} to score the probe), k = {diagnosis.k}, seed "
        f"{diagnosis.seed}; trunks ranked by {', then '.join(diagnosis.rank_by)}.</p>"
    ]
    for name, task in diagnosis.tasks.items():
        trunks = task.ranking
        x = np.arange(len(trunks))
        width = 0.8 / len(_SCORES)
        fig, ax = plt.subplots(figsize=(2.5 + 1.3 * len(trunks), 3.8))
        for i, (key, label) in enumerate(_SCORES):
            ax.bar(x + (i - 1) * width, [getattr(s, key) for s in task.scores], width, label=label)
        ax.axhline(task.majority, color="grey", linestyle=":", label="commonest answer's share")
        ax.axhline(0.5, color="black", linestyle="--", linewidth=0.8, label="discordance chance")
        ax.set_xticks(x, trunks, rotation=20)
        ax.set_ylim(0, 1)
        what = f"{kind_of(task.kind).label_word}s"
        ax.set_title(f"{name} ({task.kind}, {task.labels} {what}): best first")
        ax.legend(fontsize="small", loc="lower left")
        rows = [
            [s.trunk, s.probe, s.knn, s.discordance, s.probe_C, diagnosis.dims[s.trunk]]
            for s in task.scores
        ]
        table = _table(["trunk", "probe", "knn", "discordance", "probe C", "dim"], rows)
        sections.append(
            f'<section id="task-{html.escape(name)}"><h2>{html.escape(name)} '
            f"({html.escape(task.kind)})</h2>{table}"
            f"{_img(f'{name}: scores', figure_png(fig), 'Scores per trunk')}</section>"
        )
    return sections


def _heat(plt: Any, names: list[str], M: list[list[float]], title: str, cmap: str) -> str:
    size = 2.5 + 0.6 * len(names)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(np.asarray(M), cmap=cmap)
    ax.set_xticks(range(len(names)), names, rotation=90)
    ax.set_yticks(range(len(names)), names)
    for i, row in enumerate(M):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="small")
    ax.set_title(title)
    return figure_png(fig)


def _teacher_sections(diagnosis: TeacherDiagnosis) -> list[str]:
    plt = require("matplotlib.pyplot", "report")
    groups = "".join(f"<li>{html.escape(', '.join(g))}</li>" for g in diagnosis.groups)
    cka = _heat(plt, diagnosis.names, diagnosis.cka, "linear CKA (1: alike)", "viridis")
    gw = _heat(plt, diagnosis.names, diagnosis.gw, "Gromov-Wasserstein (0: alike)", "viridis_r")
    return [
        f"<p>{len(diagnosis.names)} teachers compared on {diagnosis.n} texts.</p>"
        f"<h2>Suggested groups (CKA ≥ {diagnosis.threshold:g} between every two)</h2>"
        f"<ul>{groups}</ul>",
        _img("linear CKA", cka, "Linear CKA") + _img("Gromov-Wasserstein", gw, "GW"),
    ]


_SECTIONS: dict[str, Callable[[Any], list[str]]] = {
    TrunkDiagnosis.subject: _trunk_sections,
    TeacherDiagnosis.subject: _teacher_sections,
}


def write_diagnosis_report(
    folder: str | os.PathLike[str],
    diagnosis: TrunkDiagnosis | TeacherDiagnosis,
    *,
    title: str = "manyheads diagnosis",
) -> Path:
    """Write ``report.json`` and ``report.html`` of ``diagnosis`` into ``folder``; the
    page's path."""
    require("matplotlib", "report").use("Agg")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sections = _SECTIONS[diagnosis.subject](diagnosis)
    doc = {"title": title, diagnosis.subject: diagnosis.as_dict()}
    atomic_write_text(folder / "report.json", json.dumps(doc, indent=1) + "\n")
    atomic_write_text(folder / "report.html", html_page(title, sections))
    return folder / "report.html"
