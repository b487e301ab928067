"""``manyheads label``: labelling a big file (or a folder of them) into one output."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

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
    from ..label import LabelOptions, label

    options: LabelOptions = {
        "heads": split_names(heads), "text_field": text_field, "id_field": id_field,
        "batch_size": batch_size, "output_format": output_format, "scores": scores,
        "tier": tier, "max_chars": max_chars, "long_texts": long_texts, "restart": restart,
    }  # fmt: skip
    if engine == "ray":
        _quiet_ray()
    summary = label(
        input_path, bundle or jobs.DEFAULT_BUNDLE, output, engine=engine, address=address,
        workers=workers, progress=sys.stderr.isatty(), **options,
    )  # fmt: skip
    bad = f", {summary.bad_rows} bad (in {summary.errors})" if summary.bad_rows else ", none bad"
    typer.echo(
        f"labelled {summary.rows} rows{bad} in {summary.seconds:.1f} s "
        f"({summary.rows_per_second:,.0f} rows/s) into {summary.output}"
    )
    if fail_on_bad_rows and summary.bad_rows:
        raise ManyheadsError(f"{summary.bad_rows} bad rows (--fail-on-bad-rows)")


def _quiet_ray() -> None:
    """Keep Ray's INFO lines (a few per dataset) and Ray Data's warnings (about its
    own settings) off the terminal. Ray sets its loggers up when imported, so it is
    imported first."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return  # the library says what to install
    import ray.data  # noqa: F401

    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.ERROR)
