"""``manyheads finetune``: fine-tuning a bundle's transformer trunk."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
    summary_table,
)


def finetune(
    data: Annotated[Path, arg("finetune:data")],
    bundle: BundleOpt,
    task: Annotated[list[str], opt("--task", "-t")],
    epochs: Annotated[int, opt("--epochs")] = 2,
    max_length: Annotated[int, opt("--max-length")] = 128,
    batch_size: Annotated[int, opt("--batch-size")] = 16,
    lr: Annotated[float, opt("--lr")] = 2e-5,
    holdout: Annotated[float, opt("--holdout")] = 0.2,
    text_field: TextFieldOpt = "text",
    group_field: Annotated[str | None, opt("finetune:--group-field")] = None,
    label_sep: LabelSepOpt = ",",
    seed: Annotated[int, opt("--seed")] = 0,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Fine-tune the bundle's transformer trunk on DATA's tasks (LP-FT); refit every head."""
    summary = jobs.finetune_file(
        data,
        bundle,
        task,
        text_field=text_field,
        group_field=group_field,
        label_sep=label_sep,
        epochs=epochs,
        max_length=max_length,
        batch_size=batch_size,
        lr=lr,
        holdout=holdout,
        seed=seed,
        cache_dir=cache_dir,
        no_cache=no_cache,
        progress=True,
    )
    r = summary.report
    losses = ", ".join(f"{v:.4f}" for v in r.losses)
    typer.echo(f"fine-tuned trunk in {r.seconds:.1f} s ({r.steps} steps; loss per epoch: {losses})")
    typer.echo(summary_table(summary.heads))
    for name in summary.dropped:
        typer.echo(
            f"note: removed head {name!r}: the bundle kept no training data for it, "
            "so it cannot be refitted on the new trunk",
            err=True,
        )
    typer.echo(f"saved {bundle} (trunk fingerprint {r.fingerprint})")
