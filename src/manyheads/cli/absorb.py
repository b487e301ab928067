"""``manyheads absorb``: the classifiers a team already runs, as heads of one bundle."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer

from .. import jobs
from .common import table
from .options import (
    BUNDLE,
    CACHE,
    DEVICE,
    JSON,
    SEED,
    TRUNCATE,
    TRUNK,
    TUNING,
    C,
    argument,
    command,
    fields,
    option,
    take,
)


@command(
    argument("data", Path, "Unlabelled texts: CSV, TSV, JSONL or Parquet file (--text-field)."),
    BUNDLE,
    option(
        "teacher",
        list[str],
        "--teacher",
        "A classifier to absorb as head NAME: NAME=SOURCE, SOURCE a Hugging Face "
        "sequence-classification folder, BUNDLE#HEAD (a head of another bundle) or a JSONL "
        'file of its answers to DATA\'s texts ({"text", "scores": {label: p}} or {"text", '
        '"label"}); repeat for more.',
    ),
    TRUNK,
    TRUNCATE,
    option(
        "finetune",
        bool,
        "--finetune",
        "First fine-tune the bundle's transformer on every teacher's answers at once (LP-FT).",
        False,
    ),
    option(
        "eval_file",
        Path | None,
        "--eval",
        "A labelled file (columns named like the teachers): accuracy and macro-F1 of each "
        "head and of its teacher side by side.",
        None,
    ),
    option(
        "temperature",
        float,
        "--temperature",
        "Softens the teachers' answers the heads learn from.",
        2.0,
    ),
    option(
        "heldout",
        float,
        "--heldout",
        "Share of DATA (grouped) held out to measure agreement with the teachers and speed.",
        0.1,
    ),
    C,
    option("epochs", int, "--epochs", "--finetune: fine-tuning epochs.", 1),
    *TUNING,
    option(
        "speed_texts",
        int,
        "--speed-texts",
        "Held-out texts timed through the teachers and the bundle (0: no timing).",
        1000,
    ),
    *fields(
        option(
            "group_field",
            str | None,
            "--group-field",
            "Rows sharing a group stay on one side of the splits.",
            None,
        )
    ),
    SEED,
    JSON,
    *CACHE,
    DEVICE,
)
def absorb(**options: Any) -> None:
    """Absorb classifiers you already run (Hugging Face models, heads of other bundles,
    files of answers) into one bundle, learning from DATA's unlabelled texts."""
    data, bundle, teachers, as_json = take(options, "data", "bundle", "teacher", "as_json")
    report = jobs.absorb_file(data, bundle, teachers, **options, progress=not as_json)
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
