"""``manyheads eval``: evaluating a bundle's heads on a labelled file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import jobs
from .common import (
    BundleOpt,
    CacheDirOpt,
    HeadsOpt,
    LabelSepOpt,
    NoCacheOpt,
    TextFieldOpt,
    TierOpt,
    arg,
    opt,
    split_names,
    table,
)


def eval_(
    data: Annotated[Path, arg("eval:data")],
    bundle: BundleOpt,
    heads: HeadsOpt = None,
    as_json: Annotated[bool, opt("--json")] = False,
    text_field: TextFieldOpt = "text",
    label_sep: LabelSepOpt = ",",
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
    tier: TierOpt = None,
    report: Annotated[Path | None, opt("--report")] = None,
    protocol: Annotated[str, opt("--protocol")] = "holdout",
    train: Annotated[Path | None, opt("--train")] = None,
    k: Annotated[int | None, opt("--k")] = None,
    experiments: Annotated[int | None, opt("--experiments")] = None,
    folds: Annotated[int | None, opt("--folds")] = None,
    group_field: Annotated[str | None, opt("eval:--group-field")] = None,
    seed: Annotated[int | None, opt("eval:--seed")] = None,
) -> None:
    """Evaluate the bundle's heads on DATA (heads whose field DATA lacks are skipped); or
    fresh heads like them by a standard protocol (--protocol mteb --train FILE, or
    --protocol kfold)."""
    metrics, notes = jobs.evaluate_file(
        data,
        bundle,
        heads=split_names(heads),
        text_field=text_field,
        label_sep=label_sep,
        cache_dir=cache_dir,
        no_cache=no_cache,
        tier=tier,
        report=report,
        progress=sys.stderr.isatty(),
        protocol=protocol,
        train=train,
        group_field=group_field,
        k=k,
        experiments=experiments,
        folds=folds,
        seed=seed,
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
