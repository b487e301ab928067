"""``manyheads finetune``: fine-tuning a bundle's transformer trunk."""

from __future__ import annotations

from typing import Any

import typer

from .. import jobs
from .common import summary_table
from .options import BUNDLE, CACHE, DATA, DEVICE, SEED, TASKS, TUNING, command, fields, option, take


@command(
    DATA,
    BUNDLE,
    TASKS,
    option("epochs", int, "--epochs", "Fine-tuning epochs.", 2),
    *TUNING,
    option(
        "holdout",
        float,
        "--holdout",
        "Share of the rows (grouped) left out of fine-tuning to calibrate the heads on.",
        0.2,
    ),
    *fields(option("group_field", str | None, "--group-field", None, None)),
    SEED,
    *CACHE,
    DEVICE,
)
def finetune(**options: Any) -> None:
    """Fine-tune the bundle's transformer trunk on DATA's tasks (LP-FT); refit every head."""
    data, bundle, tasks = take(options, "data", "bundle", "task")
    summary = jobs.finetune_file(data, bundle, tasks, **options, progress=True)
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
