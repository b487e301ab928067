"""``manyheads train``: training heads from a file into a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import jobs
from .common import (
    TASK_HELP,
    BundleOpt,
    CacheDirOpt,
    LabelSepOpt,
    MaxLabelsOpt,
    NoCacheOpt,
    TextFieldOpt,
    summary_table,
    tiers_table,
    trunk_line,
)


def train(
    data: Annotated[Path, typer.Argument(help="CSV, TSV, JSONL or Parquet file.")],
    bundle: BundleOpt,
    task: Annotated[
        list[str],
        typer.Option("--task", "-t", help=TASK_HELP),
    ],
    text_field: TextFieldOpt = "text",
    group_field: Annotated[
        str | None,
        typer.Option(
            "--group-field",
            help="Rows sharing a group stay on one side of the train/validation split.",
        ),
    ] = None,
    trunk: Annotated[
        str | None,
        typer.Option(
            "--trunk",
            help="Trunk of a new bundle: minilm+tfidf (default), minilm, hashing, tfidf, a model "
            "folder path, or several joined by '+' (with weights: minilm@1+tfidf@0.5); or byte "
            "(a byte trunk trained here on the file's tasks).",
        ),
    ] = None,
    tier: Annotated[
        int | None,
        typer.Option(
            "--tier",
            help="--trunk byte: the tier (one of the trunk's dims) the bundle answers at "
            "(default: the largest); the other tiers go to BUNDLE/tiers/.",
        ),
    ] = None,
    trunk_epochs: Annotated[
        int | None,
        typer.Option(
            "--trunk-epochs",
            help=f"--trunk byte: training epochs (default {jobs.BYTE_TRUNK_EPOCHS}).",
        ),
    ] = None,
    byte_config: Annotated[
        str | None,
        typer.Option(
            "--byte-config",
            help="--trunk byte: the trunk's shape, a JSON object of ByteConfig fields "
            '(e.g. \'{"channels": 64, "dims": [32, 64]}\').',
        ),
    ] = None,
    label_sep: LabelSepOpt = ",",
    val_fraction: Annotated[
        float,
        typer.Option("--val-fraction", help="Share of rows held out to validate each head."),
    ] = 0.2,
    c: Annotated[
        str,
        typer.Option(
            "--C",
            help="Inverse regularisation strength, or 'auto' (default) to pick it on the "
            "validation split.",
        ),
    ] = "auto",
    class_weight: Annotated[
        str | None, typer.Option("--class-weight", help="'balanced' for imbalanced labels.")
    ] = None,
    head: Annotated[
        str,
        typer.Option(
            "--head",
            help="linear (fused, default), mlp (one hidden layer), or auto "
            "(the better of both on the validation split).",
        ),
    ] = "linear",
    thresholds: Annotated[
        str,
        typer.Option(
            "--thresholds",
            help="What binary/multilabel thresholds maximise on the "
            "validation split: accuracy (default) or f1.",
        ),
    ] = "accuracy",
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of the split and of training (same seed, same heads)."),
    ] = 0,
    max_labels: MaxLabelsOpt = 1000,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Train heads from DATA into BUNDLE (created if missing; other heads are kept)."""
    report = jobs.train_report(
        data,
        bundle,
        task,
        trunk=trunk,
        text_field=text_field,
        group_field=group_field,
        label_sep=label_sep,
        val_fraction=val_fraction,
        C=c,
        class_weight=class_weight,
        head=head,
        thresholds=thresholds,
        seed=seed,
        tier=tier,
        trunk_epochs=trunk_epochs,
        byte_config=byte_config,
        cache_dir=cache_dir,
        no_cache=no_cache,
        max_labels=max_labels,
        progress=True,
        on_trunk=lambda summary: typer.echo(trunk_line(summary)),
    )
    typer.echo(summary_table(report.heads))
    if report.tiers:
        typer.echo(f"other tiers (the bundle answers at tier {report.tier}; --tier N picks one):")
        typer.echo(tiers_table(report.tiers))
    typer.echo(f"saved {bundle}")
