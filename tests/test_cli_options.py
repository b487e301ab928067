"""The commands' options come from one table (manyheads.cli.options): each option is
declared once, commands that share it hold the same record, and typer reads every
command's parameters from the records it lists."""

from __future__ import annotations

import inspect
from collections import defaultdict

import pytest
from typer.core import TyperGroup

from manyheads.cli import options
from manyheads.cli.app import click_command
from manyheads.cli.options import Param, command, declared


def _commands() -> dict[str, object]:
    """Every command (``heads list`` too): its click command."""
    group = click_command()
    found: dict[str, object] = {}
    for name, cmd in group.commands.items():
        if isinstance(cmd, TyperGroup):
            found.update({f"{name} {s}": c for s, c in cmd.commands.items()})
        else:
            found[name] = cmd
    return found


def _key(p: Param) -> tuple[object, ...]:
    """What makes two records the same option: name, flags, help, type, default."""
    info = p.info
    return (p.name, type(info).__name__, info.default, tuple(info.param_decls or ()),
            info.help, repr(p.type), repr(p.default))  # fmt: skip


def test_every_command_reads_its_parameters_from_its_records():
    for name, cmd in _commands().items():
        records = declared(cmd.callback)  # type: ignore[attr-defined]
        assert [p.name for p in cmd.params] == [p.name for p in records], name  # type: ignore[attr-defined]
        for param, record in zip(cmd.params, records, strict=True):  # type: ignore[attr-defined]
            assert param.help == record.info.help, (name, param.name)
            if record.default is not options.REQUIRED:
                assert param.default == record.default, (name, param.name)


def test_an_option_shared_by_commands_is_one_record():
    holders: dict[tuple[object, ...], dict[int, list[str]]] = defaultdict(dict)
    for name, cmd in _commands().items():
        for record in declared(cmd.callback):  # type: ignore[attr-defined]
            holders[_key(record)].setdefault(id(record), []).append(name)
    twins = {key[0]: ids for key, ids in holders.items() if len(ids) > 1}
    assert twins == {}, "declared more than once (declare it in manyheads.cli.options)"


@pytest.mark.parametrize(
    ("commands", "shared"),
    [
        (("train", "finetune"), (options.DATA, options.BUNDLE, options.TASKS, options.SEED)),
        (("train", "finetune", "absorb", "eval", "diagnose", "serve"), options.CACHE),
        (("train", "finetune", "absorb", "diagnose"), (options.TEXT_FIELD, options.LABEL_SEP)),
        (("finetune", "absorb"), options.TUNING),
        (("train", "absorb"), (options.TRUNK, options.C)),
        (("eval", "predict", "label", "serve"), (options.TIER,)),
        (("predict", "label", "serve"), (options.ANY_BUNDLE, options.MAX_CHARS)),
    ],
)
def test_commands_hold_the_shared_records_themselves(commands, shared):
    found = _commands()
    for name in commands:
        records = declared(found[name].callback)  # type: ignore[attr-defined]
        for record in shared:
            assert any(r is record for r in records), (name, record.name)


def test_a_command_signature_is_the_records_in_order():
    @command(options.TEXT_FIELD, options.SEED)
    def job(**given: object) -> object:
        return given

    signature = inspect.signature(job)
    assert list(signature.parameters) == ["text_field", "seed"]
    assert signature.parameters["seed"].default == 0
    assert declared(job) == (options.TEXT_FIELD, options.SEED)


def test_a_command_refuses_two_parameters_of_one_name():
    with pytest.raises(ValueError, match="distinct names"):
        command(options.BUNDLE, options.ANY_BUNDLE)
