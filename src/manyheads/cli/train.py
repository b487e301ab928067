"""``manyheads train``: training heads from a file into a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import jobs
from .common import (
    BundleOpt,
    CacheDirOpt,
    LabelSepOpt,
    MaxLabelsOpt,
    NoCacheOpt,
    TextFieldOpt,
    arg,
    opt,
    summary_table,
    tiers_table,
    trunk_line,
)


def train(
    data: Annotated[Path, arg("train:data")],
    bundle: BundleOpt,
    task: Annotated[list[str], opt("--task", "-t")],
    text_field: TextFieldOpt = "text",
    group_field: Annotated[str | None, opt("--group-field")] = None,
    trunk: Annotated[str | None, opt("--trunk")] = None,
    tier: Annotated[int | None, opt("--tier")] = None,
    trunk_epochs: Annotated[int | None, opt("--trunk-epochs")] = None,
    byte_config: Annotated[str | None, opt("--byte-config")] = None,
    label_sep: LabelSepOpt = ",",
    label_path_sep: Annotated[str, opt("--label-path-sep")] = "::",
    val_fraction: Annotated[float, opt("--val-fraction")] = 0.2,
    c: Annotated[str, opt("--C")] = "auto",
    class_weight: Annotated[str | None, opt("--class-weight")] = None,
    part_weights: Annotated[str, opt("--part-weights")] = "auto",
    head: Annotated[str, opt("--head")] = "linear",
    thresholds: Annotated[str, opt("--thresholds")] = "accuracy",
    seed: Annotated[int, opt("--seed")] = 0,
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
        label_path_sep=label_path_sep,
        val_fraction=val_fraction,
        C=c,
        class_weight=class_weight,
        part_weights=part_weights,
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
