"""``manyheads diagnose``: judging trunks for a file's tasks, or teachers for sharing
trunks, before training."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import jobs
from ..heads.kinds import kind_of
from .common import CacheDirOpt, LabelSepOpt, NoCacheOpt, TextFieldOpt, arg, opt, table


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


def diagnose(
    data: Annotated[Path, arg("diagnose:data")],
    task: Annotated[list[str] | None, opt("diagnose:--task", "-t")] = None,
    trunk: Annotated[list[str] | None, opt("diagnose:--trunk")] = None,
    teacher: Annotated[list[str] | None, opt("diagnose:--teacher")] = None,
    as_json: Annotated[bool, opt("--json")] = False,
    text_field: TextFieldOpt = "text",
    group_field: Annotated[str | None, opt("diagnose:--group-field")] = None,
    label_sep: LabelSepOpt = ",",
    sample: Annotated[int | None, opt("--sample")] = None,
    k: Annotated[int | None, opt("diagnose:--k")] = None,
    threshold: Annotated[float | None, opt("--threshold")] = None,
    seed: Annotated[int, opt("diagnose:--seed")] = 0,
    report: Annotated[Path | None, opt("diagnose:--report")] = None,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Rank trunks for DATA's tasks from a sample, before training (--task ... --trunk A
    --trunk B ...): a linear probe, kNN accuracy and the discordance; or compare teachers
    on DATA's texts and suggest which could share a trunk (--teacher NAME=SOURCE ...)."""
    result = jobs.diagnose_file(
        data,
        tasks=task or [],
        trunks=trunk or [],
        teachers=teacher or [],
        text_field=text_field,
        group_field=group_field,
        label_sep=label_sep,
        sample=sample,
        k=k,
        seed=seed,
        threshold=threshold,
        cache_dir=cache_dir,
        no_cache=no_cache,
        report=report,
        progress=sys.stderr.isatty(),
    )
    if report is not None:
        typer.echo(f"report: {report / 'report.html'}", err=True)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(_trunk_tables(result) if result["mode"] == "trunks" else _teacher_tables(result))
