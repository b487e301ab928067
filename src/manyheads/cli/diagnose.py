"""``manyheads diagnose``: judging trunks for a file's tasks, or teachers for sharing
trunks, before training."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from .. import jobs
from ..heads.kinds import kind_of
from .common import table
from .options import CACHE, JSON, argument, command, fields, option, take


def _trunk_tables(result: dict[str, Any]) -> str:
    blocks = [
        f"{result['n']} rows ({result['n_train']} fit the probe, {result['n_test']} score it); "
        f"k = {result['k']}; ranked by {', then '.join(result['rank_by'])}"
    ]
    for name, task in result["tasks"].items():
        rows = [
            [i + 1, s["trunk"], s["probe"], s["knn"], s["discordance"], result["dims"][s["trunk"]]]
            for i, s in enumerate(task["scores"])
        ]
        what = kind_of(task["kind"]).label_word
        blocks.append(
            f"\n{name} ({task['kind']}, {task['labels']} {what}s; commonest {what}'s share "
            f"{task['majority']:.3f})\n"
            + table(rows, ["rank", "trunk", "probe", "knn", "discordance", "dim"])
        )
    return "\n".join(blocks)


def _teacher_tables(result: dict[str, Any]) -> str:
    names = result["names"]
    cka = [[n, *row] for n, row in zip(names, result["cka"], strict=True)]
    gw = [[n, *row] for n, row in zip(names, result["gw"], strict=True)]
    groups = "\n".join(f"  {', '.join(g)}" for g in result["groups"])
    return (
        f"{len(names)} teachers on {result['n']} texts\n\nlinear CKA (1: alike)\n"
        + table(cka, ["teacher", *names])
        + "\n\nGromov-Wasserstein (0: alike)\n"
        + table(gw, ["teacher", *names])
        + f"\n\nsuggested groups (CKA >= {result['threshold']:g} between every two):\n{groups}"
    )


@command(
    argument("data", Path, "Labelled CSV, TSV, JSONL or Parquet file (--teacher: or plain text)."),
    option(
        "task",
        list[str] | None,
        "--task -t",
        "A task to rank trunks for: NAME[=FIELD][:KIND], as train names heads (multiclass, "
        "binary, multilabel, hierarchical); repeat for more tasks.",
        None,
    ),
    option(
        "trunk",
        list[str] | None,
        "--trunk",
        "A trunk to judge (any --trunk of train: minilm, hashing, tfidf, static, "
        "minilm+tfidf, a model folder, ...); repeat for more trunks.",
        None,
    ),
    option(
        "teacher",
        list[str] | None,
        "--teacher",
        "A teacher to compare instead of ranking trunks: NAME=SOURCE (a Hugging Face "
        "classification folder, BUNDLE#HEAD or a JSONL file of answers); give two or more.",
        None,
    ),
    JSON,
    *fields(
        option(
            "group_field",
            str | None,
            "--group-field",
            "Rows sharing a group are never each other's neighbours and stay on one side of "
            "the probe's split.",
            None,
        )
    ),
    option(
        "sample",
        int | None,
        "--sample",
        "Rows read at random from DATA (default 1500; --teacher: 500).",
        None,
    ),
    option(
        "k",
        int | None,
        "--k",
        "Neighbours of the kNN accuracy and the discordance (default 10).",
        None,
    ),
    option(
        "threshold",
        float | None,
        "--threshold",
        "--teacher: the linear CKA every two teachers of a suggested group reach (default 0.8).",
        None,
    ),
    option(
        "seed",
        int,
        "--seed",
        "Seed of the sample, the probe's split and the discordance's draws.",
        0,
    ),
    option(
        "report",
        Path | None,
        "--report",
        "A folder to write report.html (the scores of each trunk for each task as bars, or "
        "the teachers' CKA and Gromov-Wasserstein as heat maps) and report.json into (the "
        "report extra: matplotlib).",
        None,
    ),
    *CACHE,
)
def diagnose(**options: Any) -> None:
    """Rank trunks for DATA's tasks from a sample, before training (--task ... --trunk A
    --trunk B ...): a linear probe, kNN accuracy and the discordance; or compare teachers
    on DATA's texts and suggest which could share a trunk (--teacher NAME=SOURCE ...)."""
    data, tasks, trunks, teachers, as_json = take(
        options, "data", "task", "trunk", "teacher", "as_json"
    )
    report = options["report"]
    result = jobs.diagnose_file(
        data,
        tasks=tasks or [],
        trunks=trunks or [],
        teachers=teachers or [],
        **options,
        progress=sys.stderr.isatty(),
    )
    if report is not None:
        typer.echo(f"report: {report / 'report.html'}", err=True)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(_trunk_tables(result) if result["mode"] == "trunks" else _teacher_tables(result))
