"""``manyheads drift``: each head's drift over a file, against its reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from .common import split_names, table
from .options import (
    ANY_BUNDLE,
    BATCH_SIZE,
    HEADS,
    JSON,
    LONG_TEXTS,
    MAX_CHARS,
    TEXT_FIELD,
    TIER,
    argument,
    command,
    option,
    take,
)

ALARM_EXIT = 3  # the exit code when a head alarms


def drift_lines(heads: dict[str, dict[str, Any]]) -> str:
    """The drift table: one line per head, then a line naming the heads that alarm."""
    header = ["head", "kind", "window", "psi", "js", "conf_psi", "conf_change", "no_label",
              "inputs_t2"]  # fmt: skip
    cells = [
        [
            name,
            row["kind"],
            row["window"],
            row["psi"],
            row["js"],
            row["confidence_psi"],
            row["confidence_change"],
            row["no_label_share"],
            row["inputs_t2"],
            "ALARM" if row["alarm"] else "ok",
            row["reason"],
        ]
        for name, row in heads.items()
    ]
    alarms = [name for name, row in heads.items() if row["alarm"]]
    last = f"drift alarm: {', '.join(alarms)}" if alarms else "no drift alarm"
    return table(cells, [*header, "alarm", "reason"]) + "\n" + last


@command(
    argument(
        "input_file",
        Path,
        "A table (CSV, TSV, JSONL, Parquet: --text-field) or plain text file of texts to "
        "answer, or the output of manyheads label (its answers are read as they are).",
    ),
    ANY_BUNDLE,
    HEADS,
    TEXT_FIELD,
    option(
        "window",
        int | None,
        "--window",
        "Judge only the last WINDOW rows (default: every row).",
        None,
    ),
    BATCH_SIZE,
    TIER,
    MAX_CHARS,
    LONG_TEXTS,
    JSON,
)
def drift(**options: Any) -> None:
    """Each head's drift over INPUT against its reference (its answers on its validation
    split): PSI and Jensen-Shannon distance of the labels and the confidence given,
    the change in mean confidence, the share without a label, and (texts answered
    now, a trunk that maps meaning) Hotelling's T² of their vectors against the texts
    the head was built on. Exits with code 3 when any head alarms."""
    from .. import jobs
    from ..learn.drift import DriftSettings

    bundle, window, as_json = take(options, "bundle", "window", "as_json")
    heads = split_names(options.pop("heads"))
    settings = DriftSettings(window=window, min_window=min(200, window or 200))
    report = jobs.drift_file(
        bundle or jobs.DEFAULT_BUNDLE, heads=heads, settings=settings, **options
    )
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
    else:
        typer.echo(f"{report.rows} rows ({report.source})")
        typer.echo(drift_lines(report.heads))
    if report.alarm:
        raise typer.Exit(ALARM_EXIT)
