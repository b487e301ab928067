"""``manyheads copy``: copying a bundle whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..bundle import copy_bundle
from .options import argument, command, take


@command(
    argument("source", str, "Bundle folder, or a built-in bundle's name."),
    argument("out", Path, "New (or empty) folder to write."),
)
def copy(**options: Any) -> None:
    """Copy a bundle whole (tiers and kept training data too), e.g. the read-only
    built-in bundle, into a folder of your own to change."""
    source, out = take(options, "source", "out")
    folder = copy_bundle(source, out)
    typer.echo(f"copied {source} to {folder}")
