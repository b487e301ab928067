"""Write docs/reference/cli.md: every command's help, as ``manyheads CMD --help`` prints
it (80 columns). ``tests/test_docs.py`` checks that the page is current.

    .venv/bin/python scripts/make_cli_reference.py
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"
WIDTH = "88"


def command_paths() -> list[list[str]]:
    """Every command of the ``manyheads`` program, in the order its help lists them."""
    from typer.core import TyperGroup

    from manyheads.cli.app import click_command

    group = click_command()
    paths: list[list[str]] = [[]]
    for name, command in group.commands.items():
        paths.append([name])
        if isinstance(command, TyperGroup):
            paths += [[name, sub] for sub in command.commands]
    return paths


def help_text(path: list[str]) -> str:
    from manyheads.cli import main

    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        with contextlib.redirect_stdout(out):
            main([*path, "--help"])
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue().rstrip() + "\n"


def render() -> str:
    parts = [
        "# Command-line reference\n",
        "Every command's help, as `manyheads COMMAND --help` prints it. This page is "
        "written by\n`scripts/make_cli_reference.py` from the program itself; a test checks "
        "that it is current.\nThe guides say when to use what: "
        "[getting started](../getting-started.md),\n[training](../guides/training.md), "
        "[serving](../guides/serving.md).\n",
    ]
    for path in command_paths():
        title = " ".join(["manyheads", *path])
        parts.append(f"## `{title}`\n\n```text\n{help_text(path)}```\n")
    return "\n".join(parts)


def main() -> int:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
