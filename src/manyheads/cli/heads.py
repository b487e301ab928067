"""``manyheads heads``: listing and removing heads, a head's generations and rollback."""

from __future__ import annotations

import json
from typing import Any

import typer

from .. import jobs
from .common import table
from .options import BUNDLE, JSON, argument, command, option, take


@command(BUNDLE, option("as_json", bool, "--json", "Print JSON.", False))
def heads_list(**options: Any) -> None:
    """Name, kind, number of labels and validation metrics of each head."""
    bundle, as_json = take(options, "bundle", "as_json")
    rows = jobs.list_heads(bundle)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    cells = [
        [
            r["name"],
            r["kind"],
            r["labels"],
            r["field"],
            r["n_train"],
            r["metrics"].get("accuracy"),
            r["metrics"].get("macro_f1"),
            r["metrics"].get("micro_f1"),
            r["metrics"].get("ece"),
        ]
        for r in rows
    ]
    typer.echo(
        table(
            cells,
            [
                "head",
                "kind",
                "labels",
                "field",
                "train",
                "val_acc",
                "val_macro_f1",
                "val_micro_f1",
                "val_ece",
            ],
        )
    )


@command(argument("name", str, "Head to remove."), BUNDLE)
def heads_rm(**options: Any) -> None:
    """Remove one head from the bundle (saved atomically)."""
    name, bundle = take(options, "name", "bundle")
    jobs.remove_head(bundle, name)
    typer.echo(f"removed head {name!r} from {bundle}")


@command(argument("name", str, "Head whose generations to list."), BUNDLE, JSON)
def heads_history(**options: Any) -> None:
    """A head's generations, the current one first: when each was made or replaced, why."""
    name, bundle, as_json = take(options, "name", "bundle", "as_json")
    rows = jobs.head_history(bundle, name)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    cells = [
        [
            r["generation"],
            "current" if r["current"] else "",
            r.get("created") or r.get("replaced"),
            (r.get("metrics") or {}).get("accuracy"),
            r.get("why") or "",
        ]
        for r in rows
    ]
    typer.echo(table(cells, ["generation", "", "created/replaced", "val_acc", "why"]))


@command(
    argument("name", str, "Head to roll back."),
    BUNDLE,
    option(
        "to",
        int | None,
        "--to",
        "The generation to make current (default: the one before the current).",
        None,
    ),
)
def heads_rollback(**options: Any) -> None:
    """Make an earlier generation of a head current again; it answers exactly as it did."""
    name, bundle, to = take(options, "name", "bundle", "to")
    generation = jobs.rollback_head(bundle, name, to)
    typer.echo(f"head {name!r} of {bundle} is at generation {generation}")
