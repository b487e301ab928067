"""``manyheads label``: labelling a big file (or a folder of them) into one output."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ..label import LabelSummary

from ..errors import ManyheadsError
from .common import (
    AnyBundleOpt,
    HeadsOpt,
    MaxCharsOpt,
    TextFieldOpt,
    TierOpt,
    arg,
    opt,
    split_names,
)


def label(
    input_path: Annotated[Path, arg("label:input")],
    output: Annotated[Path, opt("--output", "-o")],
    bundle: AnyBundleOpt = None,
    heads: HeadsOpt = None,
    text_field: TextFieldOpt = "text",
    id_field: Annotated[str | None, opt("--id-field")] = None,
    batch_size: Annotated[int, opt("label:--batch-size")] = 256,
    output_format: Annotated[str | None, opt("--format")] = None,
    input_format: Annotated[str | None, opt("--input-format")] = None,
    scores: Annotated[str, opt("label:--scores")] = "top",
    engine: Annotated[str, opt("--engine")] = "local",
    address: Annotated[str | None, opt("--address")] = None,
    workers: Annotated[int | None, opt("--workers")] = None,
    tier: TierOpt = None,
    max_chars: MaxCharsOpt = 100_000,
    long_texts: Annotated[str, opt("label:--long-texts")] = "refuse",
    restart: Annotated[bool, opt("--restart")] = False,
    fail_on_bad_rows: Annotated[bool, opt("--fail-on-bad-rows")] = False,
) -> None:
    """Label every row of INPUT (JSONL, JSONL.gz, CSV, TSV, Parquet, or a folder of
    them) with the bundle's heads into OUTPUT: streamed, resumable (run the same
    command again after an interruption), bad rows in OUTPUT.errors.jsonl."""
    from .. import jobs
    from ..label import LabelSettings, label

    settings = LabelSettings(
        heads=split_names(heads), text_field=text_field, id_field=id_field,
        batch_size=batch_size, output_format=output_format, input_format=input_format,
        scores=scores, tier=tier, max_chars=max_chars, long_texts=long_texts, restart=restart,
    )  # fmt: skip
    if engine == "ray":
        _quiet_ray()
    summary = label(
        input_path, bundle or jobs.DEFAULT_BUNDLE, output, settings, engine=engine,
        address=address, workers=workers, progress=sys.stderr.isatty(),
    )  # fmt: skip
    typer.echo(summary_line(summary))
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
