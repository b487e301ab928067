"""``manyheads export``: exporting a bundle to one ONNX graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .. import jobs
from .options import BUNDLE, command, option, take


@command(
    BUNDLE,
    option("out", Path, "--out -o", "New (or empty) folder to write."),
    option(
        "int8",
        bool,
        "--int8",
        "Quantise the encoder's weights to int8 (dynamic); a float-arithmetic twin (its "
        "weights stored as int8) is kept too and answers again the texts some head is unsure "
        "of (calibrated on the kept training texts), so the folder is about twice the int8 "
        "graph alone (MiniLM: ~52 MB, not ~28).",
        False,
    ),
    option(
        "no_recheck",
        bool,
        "--no-recheck",
        "With --int8: keep no float twin; int8 answers every text (about half the size).",
        False,
    ),
)
def export(**options: Any) -> None:
    """Export the bundle to one ONNX graph (trunk + every head): a bundle that runs
    with onnxruntime, without torch."""
    bundle, out, int8, no_recheck = take(options, "bundle", "out", "int8", "no_recheck")
    folder = jobs.export_file(bundle, out, int8=int8, recheck=not no_recheck)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    kept = int8 and not no_recheck
    typer.echo(
        f"exported {bundle} to {folder} ({size / 1e6:.1f} MB{', int8' if int8 else ''}"
        + (
            ", with a float-arithmetic twin kept beside the int8 graph to answer unsure texts "
            "again; --no-recheck writes the int8 graph alone, about half the size)"
            if kept
            else ")"
        )
    )
