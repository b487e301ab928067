"""``manyheads eval``: evaluating a bundle's heads on a labelled file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from .. import jobs
from .common import split_names, table
from .options import (
    BUNDLE,
    CACHE,
    DEVICE,
    HEADS,
    JSON,
    LABEL_SEP,
    TEXT_FIELD,
    TIER,
    argument,
    command,
    option,
    take,
)

REPORT = option(
    "report",
    Path | None,
    "--report",
    "A folder to write report.html (figures of each head's answers: confusions, F1 "
    "per label, reliability before and after temperature scaling, scores) and "
    "report.json into (the report extra: matplotlib).",
    None,
)
# fresh heads by a standard protocol
PROTOCOL = (
    option(
        "protocol",
        str,
        "--protocol",
        "holdout (the bundle's heads on DATA), mteb (MTEB's classification protocol: "
        "fresh logistic regressions on k rows a label of --train, scored on DATA, 10 "
        "experiments) or kfold (fresh heads like the bundle's, k-fold on DATA); mean ± std.",
        "holdout",
    ),
    option(
        "train",
        Path | None,
        "--train",
        "--protocol mteb: the labelled file the fresh classifiers learn from.",
        None,
    ),
    option(
        "k",
        int | None,
        "--k",
        "--protocol mteb: training rows per label in each experiment (default 8).",
        None,
    ),
    option(
        "experiments",
        int | None,
        "--experiments",
        "--protocol mteb: experiments (default 10).",
        None,
    ),
    option("folds", int | None, "--folds", "--protocol kfold: folds (default 5).", None),
    option(
        "group_field",
        str | None,
        "--group-field",
        "--protocol kfold: rows sharing a group stay in one fold.",
        None,
    ),
    option("seed", int | None, "--seed", "--protocol mteb: 42 (MTEB's); kfold: 0.", None),
)


@command(
    argument("data", Path, "Labelled CSV, TSV, JSONL or Parquet file."),
    BUNDLE, HEADS, JSON, TEXT_FIELD, LABEL_SEP, *CACHE, DEVICE, TIER, REPORT, *PROTOCOL,
)  # fmt: skip
def eval_(**options: Any) -> None:
    """Evaluate the bundle's heads on DATA (heads whose field DATA lacks are skipped); or
    fresh heads like them by a standard protocol (--protocol mteb --train FILE, or
    --protocol kfold)."""
    data, bundle, heads, as_json = take(options, "data", "bundle", "heads", "as_json")
    report, protocol = options["report"], options["protocol"]
    metrics, notes = jobs.evaluate_file(
        data, bundle, heads=split_names(heads), **options, progress=sys.stderr.isatty()
    )
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    if report is not None:
        typer.echo(f"report: {report / 'report.html'}", err=True)
    if as_json:
        typer.echo(json.dumps({"heads": metrics}))
        return
    if protocol != "holdout":  # mean ± standard deviation over the runs
        keys = [k for k in ("accuracy", "macro_f1", "micro_f1", "average_precision")
                if any(k in m for m in metrics.values())]  # fmt: skip
        rows = [
            [n, m["kind"], len(m["runs"])]
            + [f"{m[k]:.4f} ± {m[k + '_std']:.4f}" if k in m else "" for k in keys]
            for n, m in metrics.items()
        ]
        typer.echo(table(rows, ["head", "kind", "runs", *keys]))
        return
    rows = [
        [
            n,
            m["kind"],
            m["n"],
            m.get("accuracy"),
            m.get("macro_f1"),
            m.get("micro_f1"),
            m.get("ece"),
        ]
        for n, m in metrics.items()
    ]
    typer.echo(table(rows, ["head", "kind", "n", "accuracy", "macro_f1", "micro_f1", "ece"]))
