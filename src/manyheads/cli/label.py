"""``manyheads label``: labelling a big file (or a folder of them) into one output."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from ..label import LabelSummary

from ..errors import ManyheadsError
from .common import split_names
from .options import (
    ANY_BUNDLE,
    BATCH_SIZE,
    DEVICE,
    HEADS,
    MAX_CHARS,
    TEXT_FIELD,
    TIER,
    argument,
    command,
    option,
    take,
)


@command(
    argument(
        "input_path", Path, "A JSONL, JSONL.gz, CSV, TSV or Parquet file, or a folder of them."
    ),
    option(
        "output",
        Path,
        "--output -o",
        "The file to write (its format from its name: .jsonl, .jsonl.gz, .csv, .tsv, "
        ".parquet; or --format); the job's parts wait beside it in OUTPUT.parts/. "
        "--engine ray: a folder, with a folder of files for each input file.",
    ),
    ANY_BUNDLE,
    HEADS,
    TEXT_FIELD,
    option(
        "id_field",
        str | None,
        "--id-field",
        "A field naming each row, copied into the errors file.",
        None,
    ),
    BATCH_SIZE,
    option(
        "output_format",
        str | None,
        "--format",
        "Format of OUTPUT: jsonl, csv, tsv or parquet (default: from its name; a folder "
        "of parts with --engine ray: jsonl).",
        None,
    ),
    option(
        "input_format",
        str | None,
        "--input-format",
        "Format of INPUT's files: jsonl, csv, tsv or parquet (default: from each name).",
        None,
    ),
    option(
        "scores",
        str,
        "--scores",
        "Class scores kept in JSONL: all, top (the best five; default) or none.",
        "top",
    ),
    option(
        "top_k",
        int | None,
        "--top-k",
        "Keep each answer's best K labels with their scores (a tree head's ranking).",
        None,
    ),
    option(
        "engine",
        str,
        "--engine",
        "local (this machine) or ray (Ray Data: this machine or a cluster).",
        "local",
    ),
    option(
        "address",
        str | None,
        "--address",
        "--engine ray: the Ray cluster to connect to (default: a local one).",
        None,
    ),
    option(
        "workers",
        int | None,
        "--workers",
        "--engine local: processes answering parts side by side, each loading the bundle "
        "once (for trunks that do not use every core; default 1). --engine ray: the "
        "actors (default one per CPU of the cluster).",
        None,
    ),
    TIER,
    DEVICE,
    option(
        "gpu_batch_size",
        int,
        "--gpu-batch-size",
        "Texts a trunk pass when the trunk runs on a GPU (the job then runs in one process).",
        16_384,
    ),
    MAX_CHARS,
    option(
        "long_texts",
        str,
        "--long-texts",
        "Texts over --max-chars: 'refuse' (a bad row, in the errors file) or 'window' "
        "(read in pieces of --max-chars, probabilities averaged).",
        "refuse",
    ),
    option(
        "restart",
        bool,
        "--restart",
        "Start over: drop the parts and output of an earlier run.",
        False,
    ),
    option(
        "fail_on_bad_rows",
        bool,
        "--fail-on-bad-rows",
        "Exit with code 1 when a row could not be labelled.",
        False,
    ),
    option(
        "drift",
        bool,
        "--drift",
        "Add each head's drift over the output to the summary (as manyheads drift prints it).",
        False,
    ),
)
def label(**options: Any) -> None:
    """Label every row of INPUT (JSONL, JSONL.gz, CSV, TSV, Parquet, or a folder of
    them) with the bundle's heads into OUTPUT: streamed, resumable (run the same
    command again after an interruption), bad rows in OUTPUT.errors.jsonl."""
    from .. import jobs
    from ..label import LabelSettings, label

    input_path, output, bundle = take(options, "input_path", "output", "bundle")
    engine, address, workers = take(options, "engine", "address", "workers")
    fail_on_bad_rows, drift = take(options, "fail_on_bad_rows", "drift")
    settings = LabelSettings(**options | {"heads": split_names(options["heads"])})
    if engine == "ray":
        _quiet_ray()
    summary = label(
        input_path, bundle or jobs.DEFAULT_BUNDLE, output, settings, engine=engine,
        address=address, workers=workers, progress=sys.stderr.isatty(),
    )  # fmt: skip
    typer.echo(summary_line(summary))
    if drift:
        from .drift import drift_lines

        found = jobs.drift_file(
            bundle or jobs.DEFAULT_BUNDLE, summary.output, heads=settings.heads, tier=settings.tier
        )
        typer.echo(drift_lines(found.heads))
    if fail_on_bad_rows and summary.bad_rows:
        raise ManyheadsError(f"{summary.bad_rows} bad rows (--fail-on-bad-rows)")


def summary_line(summary: LabelSummary) -> str:
    """What a labelling job did, in one line (two for a resumed one)."""
    bad = f", {summary.bad_rows} bad (in {summary.errors})" if summary.bad_rows else ", none bad"
    if summary.already_done:
        return (
            f"already done: {summary.output} holds {summary.rows} rows{bad} "
            "(--restart labels them again)"
        )
    lines = []
    if summary.resumed_parts:
        total = summary.parts + summary.resumed_parts
        lines.append(
            f"resumed: {summary.resumed_parts} of {total} parts were done by an earlier run"
        )
    if summary.stale_parts:
        lines.append(
            f"{summary.stale_parts} parts done earlier were read from other input bytes "
            "(edited since): labelled again"
        )
    answered = summary.rows if summary.answered_rows is None else summary.answered_rows
    now = f"{answered} rows now, " if answered != summary.rows else ""
    lines.append(
        f"labelled {summary.rows} rows{bad} into {summary.output} ({now}{summary.seconds:.1f} s, "
        f"{summary.rows_per_second:,.0f} rows/s)"
    )
    return "\n".join(lines)


def _quiet_ray() -> None:
    """Keep Ray's INFO lines (a few per dataset) and Ray Data's warnings (about its
    own settings) off the terminal. Ray sets its loggers up when imported, so it is
    imported first."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return  # the library says what to install
    import ray.data  # noqa: F401

    logging.getLogger("ray").setLevel(logging.WARNING)
    # a file Ray Data cannot read is said in one line by the job, not in Ray's own
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
