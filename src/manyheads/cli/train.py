"""``manyheads train``: training heads from a file into a bundle."""

from __future__ import annotations

from typing import Any

import typer

from .. import jobs
from .common import summary_table, tiers_table, trunk_line
from .options import (
    BUNDLE,
    CACHE,
    DATA,
    DEVICE,
    LABEL_SEP,
    MAX_LABELS,
    SEED,
    TASKS,
    TEXT_FIELD,
    TRUNCATE,
    TRUNK,
    C,
    command,
    option,
    take,
)

GROUP_FIELD = option(
    "group_field",
    str | None,
    "--group-field",
    "Rows sharing a group stay on one side of the train/validation split.",
    None,
)
# a byte trunk trained here
BYTE_TRUNK = (
    option(
        "tier",
        int | None,
        "--tier",
        "--trunk byte: the tier (one of the trunk's dims) the bundle answers at (default: the"
        " largest); the other tiers go to BUNDLE/tiers/.",
        None,
    ),
    option(
        "trunk_epochs",
        int | None,
        "--trunk-epochs",
        "--trunk byte: training epochs (default 4).",
        None,
    ),
    option(
        "byte_config",
        str | None,
        "--byte-config",
        "--trunk byte: the trunk's shape, a JSON object of ByteConfig fields (e.g. "
        '\'{"channels": 64, "dims": [32, 64]}\').',
        None,
    ),
)
# how each head is fitted
FITTING = (
    option(
        "label_path_sep",
        str,
        "--label-path-sep",
        "What separates the parts of a hierarchical head's labels (role::program; a/b/c with '/').",
        "::",
    ),
    option(
        "val_fraction",
        float,
        "--val-fraction",
        "Share of rows held out to validate each head.",
        0.2,
    ),
    C,
    option("class_weight", str | None, "--class-weight", "'balanced' for imbalanced labels.", None),
    option(
        "part_weights",
        str,
        "--part-weights",
        "On a composite trunk: auto (default) lets each linear head weigh the trunk's parts "
        "on its validation split; fixed keeps the trunk's weights.",
        "auto",
    ),
    option(
        "head",
        str,
        "--head",
        "linear (fused, default), mlp (one hidden layer), tree (a label tree searched by beam, "
        "for 10^4 to 10^6 labels), or auto (the better of linear and mlp on the validation "
        "split; a tree above 5,000 labels).",
        "linear",
    ),
    option("beam", int, "--beam", "A tree head's search: inner nodes kept per level.", 10),
    option(
        "precision",
        str,
        "--precision",
        "How a tree head stores its weights: float16 (default), int8, or int4 (two a byte).",
        "float16",
    ),
    option(
        "trees",
        str,
        "--trees",
        "A tree head's trees, each grown from another seed, their probabilities averaged: "
        "more accurate, each one costing its memory and its search again; auto: two up to "
        "100,000 labels, one above.",
        "auto",
    ),
    option(
        "thresholds",
        str,
        "--thresholds",
        "What binary/multilabel thresholds maximise on the validation split: accuracy "
        "(default), f1, or f0.5 (precision weighs twice: fewer false alarms).",
        "accuracy",
    ),
    SEED,
)


@command(
    DATA, BUNDLE, TASKS, TEXT_FIELD, GROUP_FIELD, TRUNK, TRUNCATE, *BYTE_TRUNK, LABEL_SEP,
    *FITTING,
    MAX_LABELS, *CACHE, DEVICE,
)  # fmt: skip
def train(**options: Any) -> None:
    """Train heads from DATA into BUNDLE (created if missing; other heads are kept)."""
    data, bundle, tasks = take(options, "data", "bundle", "task")
    report = jobs.train_report(
        data,
        bundle,
        tasks,
        **options,
        progress=True,
        on_trunk=lambda summary: typer.echo(trunk_line(summary)),
    )
    typer.echo(summary_table(report.heads))
    if report.tiers:
        typer.echo(f"other tiers (the bundle answers at tier {report.tier}; --tier N picks one):")
        typer.echo(tiers_table(report.tiers))
    typer.echo(f"saved {bundle}")
