"""``manyheads heads``: listing and removing heads."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .. import jobs
from .common import BundleOpt, arg, opt, table


def heads_list(
    bundle: BundleOpt,
    as_json: Annotated[bool, opt("heads list:--json")] = False,
) -> None:
    """Name, kind, number of labels and validation metrics of each head."""
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


def heads_rm(
    name: Annotated[str, arg("heads rm:name")],
    bundle: BundleOpt,
) -> None:
    """Remove one head from the bundle (saved atomically)."""
    jobs.remove_head(bundle, name)
    typer.echo(f"removed head {name!r} from {bundle}")
