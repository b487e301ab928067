"""The ``manyheads`` command: one module per command; each parses, calls one library
function (:mod:`manyheads.jobs`), and prints.

Library errors become ``manyheads: error: MESSAGE`` on stderr and exit code 1, a
parameter named in the message shown as its flag (``--trunk-epochs``); usage errors
exit 2. No traceback is shown for either. Flag names live in this package only.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from ..errors import ConfigError, ManyheadsError
from .app import app, click_command

__all__ = ["app", "main", "run"]


def _flags(command: TyperCommand | TyperGroup) -> dict[str, str]:
    """Every parameter's name in the library -> how the command line writes it: the
    option's first flag (``--trunk-epochs``), an argument's name (``TEXTS``)."""
    found: dict[str, str] = {}
    for param in command.params:
        if param.name and param.name not in found:
            shown = param.opts[0] if param.opts else param.name
            found[param.name] = param.name.upper() if isinstance(param, TyperArgument) else shown
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            assert isinstance(sub, TyperCommand | TyperGroup)
            for name, shown in _flags(sub).items():
                found.setdefault(name, shown)
    return found


def message(exc: ManyheadsError, command: TyperGroup | None = None) -> str:
    """A library error as the command line says it (parameters shown as flags)."""
    if isinstance(exc, ConfigError) and exc.options:
        flags = _flags(command or click_command())
        extra = {
            "input_file": "--input FILE", "texts": "TEXT arguments",
            "train_texts": "--train FILE", "groups": "--group-field",
            "path_sep": "--label-path-sep",
        }  # fmt: skip
        return exc.render(
            lambda name: extra.get(name) or flags.get(name) or flags.get(name.lower(), name)
        )
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning library errors into one line and exit code 1."""
    command = click_command()
    try:
        # a command that ends with typer.Exit(code) (``drift``: 3) gives its code back
        code = command.main(args=argv, prog_name="manyheads", standalone_mode=False)
    except ManyheadsError as exc:
        typer.echo(f"manyheads: error: {message(exc, command)}", err=True)
        return 1
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("manyheads: interrupted", err=True)
        return 130
    except typer.TyperException as exc:  # usage errors: message and usage, exit 2
        # typer carries click's exceptions (with show and exit_code) under this base
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            typer.echo(f"manyheads: error: {exc}", err=True)
        return int(getattr(exc, "exit_code", 2))
    except BrokenPipeError:
        return 0
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
