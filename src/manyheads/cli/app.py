"""The typer application every command registers with."""

from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from . import (
    absorb,
    copy,
    diagnose,
    drift,
    evaluate,
    export,
    finetune,
    heads,
    label,
    learn,
    predict,
    serve,
    train,
)

__all__ = ["app", "click_command", "heads_app"]

app = typer.Typer(
    name="manyheads",
    help="One shared encoder, many small heads: train, evaluate and run text classifiers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # plain help: wraps every description at the terminal's width (no cut-off cells,
    # no type column that calls a flag <bool>)
    rich_markup_mode=None,
)
heads_app = typer.Typer(
    help="List or remove the heads of a bundle; list or roll back a head's generations.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(heads_app, name="heads")
# the commands, in the order help lists them
app.command()(train.train)
app.command()(finetune.finetune)
app.command()(absorb.absorb)
app.command("eval")(evaluate.eval_)
app.command()(diagnose.diagnose)
app.command()(predict.predict)
app.command()(label.label)
app.command()(learn.feedback)
app.command()(learn.update)
app.command()(drift.drift)
app.command("export")(export.export)
app.command("copy")(copy.copy)
app.command()(serve.serve)
heads_app.command("list")(heads.heads_list)
heads_app.command("rm")(heads.heads_rm)
heads_app.command("history")(heads.heads_history)
heads_app.command("rollback")(heads.heads_rollback)
heads_app.command("add")(heads.heads_add)
heads_app.command("show")(heads.heads_show)
heads_app.command("relabel")(heads.heads_relabel)


def _print_version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"manyheads {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """One shared encoder, many small heads: train, evaluate and run text classifiers."""


def click_command() -> TyperGroup:
    """The click command of ``app``, every value shown in help as its name (``--bundle
    BUNDLE``, ``DATA``), not as a Python type."""
    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)

    def name_values(cmd: TyperCommand | TyperGroup) -> None:
        for param in cmd.params:
            flag = isinstance(param, TyperOption) and param.is_flag
            if not flag and param.name:
                param.metavar = param.name.upper()
        if isinstance(cmd, TyperGroup):
            for sub in cmd.commands.values():
                if isinstance(sub, TyperCommand | TyperGroup):
                    name_values(sub)

    name_values(command)
    return command
