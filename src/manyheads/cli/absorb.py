"""``manyheads absorb``: the classifiers a team already runs, as heads of one bundle."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import jobs
from .common import (
    BundleOpt,
    CacheDirOpt,
    LabelSepOpt,
    NoCacheOpt,
    TextFieldOpt,
    arg,
    opt,
    table,
)


def absorb(
    data: Annotated[Path, arg("absorb:data")],
    bundle: BundleOpt,
    teacher: Annotated[list[str], opt("--teacher")],
    trunk: Annotated[str | None, opt("--trunk")] = None,
    finetune: Annotated[bool, opt("absorb:--finetune")] = False,
    eval_file: Annotated[Path | None, opt("absorb:--eval")] = None,
    temperature: Annotated[float, opt("--temperature")] = 2.0,
    heldout: Annotated[float, opt("absorb:--heldout")] = 0.1,
    C: Annotated[str, opt("--C")] = "auto",
    epochs: Annotated[int, opt("absorb:--epochs")] = 1,
    max_length: Annotated[int, opt("--max-length")] = 128,
    batch_size: Annotated[int, opt("--batch-size")] = 16,
    lr: Annotated[float, opt("--lr")] = 2e-5,
    speed_texts: Annotated[int, opt("--speed-texts")] = 1000,
    text_field: TextFieldOpt = "text",
    group_field: Annotated[str | None, opt("absorb:--group-field")] = None,
    label_sep: LabelSepOpt = ",",
    seed: Annotated[int, opt("--seed")] = 0,
    as_json: Annotated[bool, opt("--json")] = False,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Absorb classifiers you already run (Hugging Face models, heads of other bundles,
    files of answers) into one bundle, learning from DATA's unlabelled texts."""
    report = jobs.absorb_file(
        data,
        bundle,
        teacher,
        trunk=trunk,
        finetune=finetune,
        eval_file=eval_file,
        text_field=text_field,
        group_field=group_field,
        label_sep=label_sep,
        temperature=temperature,
        heldout=heldout,
        C=C,
        epochs=epochs,
        max_length=max_length,
        batch_size=batch_size,
        lr=lr,
        speed_texts=speed_texts,
        seed=seed,
        cache_dir=cache_dir,
        no_cache=no_cache,
        progress=not as_json,
    )
    if as_json:
        typer.echo(json.dumps(_plain(report), default=str))
        return
    typer.echo(table(_rows(report), _HEADER))
    typer.echo(
        f"{report.texts} texts ({report.split['train']} learnt from, "
        f"{report.split['validation']} calibrate, {report.split['heldout']} held out); "
        f"skipped {report.skipped_empty} empty, {report.duplicates} repeated"
    )
    if report.teachers_bytes:
        ratio = report.teachers_bytes / report.bundle_bytes
        typer.echo(
            f"on disk: teachers {_mb(report.teachers_bytes)}, bundle "
            f"{_mb(report.bundle_bytes)} ({ratio:.1f}x smaller)"
        )
    if report.speed:
        s = report.speed
        typer.echo(
            f"labelling {int(s['texts'])} texts: teachers one after another "
            f"{s['teachers_texts_per_s']:.1f} texts/s, bundle {s['bundle_texts_per_s']:.1f} "
            f"texts/s ({s['speedup']:.1f}x)"
        )
    typer.echo(f"saved {bundle}")


_HEADER = [
    "head",
    "kind",
    "labels",
    "agreement",
    "student_acc",
    "teacher_acc",
    "student_macro_f1",
    "teacher_macro_f1",
]


def _rows(report: Any) -> list[list[Any]]:
    def get(scores: dict[str, float] | None, key: str) -> Any:
        return None if scores is None else scores.get(key)

    return [
        [
            h.name,
            h.kind,
            h.labels,
            h.agreement,
            get(h.student, "accuracy"),
            get(h.teacher, "accuracy"),
            get(h.student, "macro_f1"),
            get(h.teacher, "macro_f1"),
        ]
        for h in report.heads
    ]


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _plain(report: Any) -> dict[str, Any]:
    out = dataclasses.asdict(report)
    for head in out["heads"]:
        summary = head.pop("summary")
        head["validation"] = summary["metrics"]
    return out
