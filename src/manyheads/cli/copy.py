"""``manyheads copy``: copying a bundle whole."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..bundle import copy_bundle
from .common import arg


def copy(
    source: Annotated[str, arg("copy:source")],
    out: Annotated[Path, arg("copy:out")],
) -> None:
    """Copy a bundle whole (tiers and kept training data too), e.g. the read-only
    built-in bundle, into a folder of your own to change."""
    folder = copy_bundle(source, out)
    typer.echo(f"copied {source} to {folder}")
