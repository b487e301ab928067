"""``manyheads feedback`` and ``manyheads update``: keeping corrections with a bundle and
updating its heads from them."""

from __future__ import annotations

import json
from typing import Any

import typer

from .. import jobs
from .common import table
from .options import (
    BUNDLE,
    CACHE,
    DATA,
    HEADS,
    JSON,
    LABEL_SEP,
    SEED,
    TEXT_FIELD,
    command,
    option,
    take,
)

FEEDBACK_TASKS = option(
    "task",
    list[str],
    "--task -t",
    "A head to read corrections for, NAME[=FIELD] (default: every head, from its own "
    "field); repeat for more.",
    [],
)


@command(DATA, BUNDLE, FEEDBACK_TASKS, TEXT_FIELD, LABEL_SEP, JSON)
def feedback(**options: Any) -> None:
    """Keep the corrections in DATA with BUNDLE: rows with the text and the right label
    for any of the heads (a row without a head's field has no correction for it)."""
    data, bundle, tasks, as_json = take(options, "data", "bundle", "task", "as_json")
    counts = jobs.feedback_file(data, bundle, tasks, **options)
    if as_json:
        typer.echo(json.dumps({"kept": counts}))
        return
    kept = ", ".join(f"{head} {n}" for head, n in counts.items())
    typer.echo(f"kept corrections in {bundle}: {kept}")


@command(
    BUNDLE,
    HEADS,
    option(
        "min_feedback",
        int,
        "--min-feedback",
        "New corrections a head needs before it is refitted.",
        1,
    ),
    option(
        "dry_run", bool, "--dry-run", "Judge old against new and report; change nothing.", False
    ),
    option(
        "full",
        bool,
        "--full",
        "Fit each head by its whole recipe, as train does (C searched, temperature "
        "cross-fitted; slower); default: from its weights.",
        False,
    ),
    SEED,
    *CACHE,
    JSON,
)
def update(**options: Any) -> None:
    """Refit BUNDLE's heads from their kept data and corrections; promote each new head
    only when it is not worse than the old one (see docs/guides/learning.md)."""
    bundle, heads, as_json = take(options, "bundle", "heads", "as_json")
    report = jobs.update_bundle(bundle, heads, **options)
    if as_json:
        typer.echo(json.dumps(report.to_dict()))
        return
    rows = [
        [
            h.head,
            "promoted" if h.promoted else "kept",
            h.generation,
            h.rows_feedback,
            h.rows_held_back,
            h.before,
            h.after,
            h.before_old,
            h.after_old,
            h.fit,
            h.seconds,
        ]
        for h in report.heads
    ]
    header = ["head", "result", "gen", "corrections", "held_back", "before", "after"]
    typer.echo(table(rows, [*header, "before_old", "after_old", "fit", "seconds"]))
    for h in report.heads:
        typer.echo(f"{h.head}: {h.reason}")
    if report.dry_run:
        typer.echo("dry run: nothing changed")
