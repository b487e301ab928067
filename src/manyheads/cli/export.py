"""``manyheads export``: exporting a bundle to one ONNX graph."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import jobs
from .common import BundleOpt, opt


def export(
    bundle: BundleOpt,
    out: Annotated[Path, opt("--out", "-o")],
    int8: Annotated[bool, opt("--int8")] = False,
    no_recheck: Annotated[bool, opt("--no-recheck")] = False,
) -> None:
    """Export the bundle to one ONNX graph (trunk + every head): a bundle that runs
    with onnxruntime, without torch."""
    folder = jobs.export_file(bundle, out, int8=int8, recheck=not no_recheck)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    kept = int8 and not no_recheck
    typer.echo(
        f"exported {bundle} to {folder} ({size / 1e6:.1f} MB{', int8' if int8 else ''}"
        + (
            ", with the float32 graph kept beside the int8 one to answer unsure texts again; "
            "--no-recheck writes the int8 graph alone, about a quarter of the size)"
            if kept
            else ")"
        )
    )
