"""``manyheads heads``: listing and removing heads, a head's generations and rollback;
heads made from label names (``add``), shown and relabelled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from .. import jobs
from .common import table
from .options import BUNDLE, CACHE, JSON, argument, command, option, take


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


LABELS = option(
    "labels",
    list[str],
    "--label -l",
    "A label, 'NAME' or 'NAME: DESCRIPTION' (the name ends at the first ': '); repeat for more.",
    [],
)
LABELS_FILE = option(
    "labels_file",
    Path | None,
    "--labels-file",
    "A JSON object mapping each label to its description (or null), or a list of names.",
    None,
)


@command(
    argument("name", str, "Head to add (or replace)."),
    BUNDLE,
    LABELS,
    LABELS_FILE,
    option(
        "kind",
        str,
        "--kind",
        "multiclass, binary (one label X: 'is this about X'), multilabel or hierarchical "
        "(labels are paths, parent::child).",
        "multiclass",
    ),
    option(
        "trunk",
        str | None,
        "--trunk",
        "Trunk of a new bundle (default: minilm); one that maps texts by meaning: minilm, "
        "static, a model folder, or a composite holding one that needs no texts to fit.",
        None,
    ),
    option("path_sep", str, "--label-path-sep", "Separator of hierarchical label paths.", "::"),
    *CACHE,
    JSON,
)
def heads_add(**options: Any) -> None:
    """Add a head made from label names and descriptions: it answers at once, one block
    of the fused product, and learns from examples and corrections (docs/guides/zero-shot.md)."""
    name, bundle, as_json = take(options, "name", "bundle", "as_json")
    found = jobs.add_named_head(bundle, name, **options)
    if as_json:
        typer.echo(json.dumps(found))
        return
    typer.echo(
        f"added head {name!r} ({found['kind']}, {len(found['labels'])} labels, made from their "
        f"names on trunk {found['trunk']}) to {bundle} in {found['seconds']:.2f} s"
    )


@command(argument("name", str, "Head to show."), BUNDLE, JSON)
def heads_show(**options: Any) -> None:
    """A head's kind, how it was made (from label names, examples or both, and how many),
    its labels with their descriptions, and its validation metrics."""
    name, bundle, as_json = take(options, "name", "bundle", "as_json")
    found = jobs.show_head(bundle, name)
    if as_json:
        typer.echo(json.dumps(found))
        return
    _print_head(found)


def _print_head(found: dict[str, Any]) -> None:
    made = found["made"]
    how = made.get("from", "examples")
    examples = made.get("examples", found.get("n_train"))
    typer.echo(
        f"head {found['name']}: {found['kind']}, field {found['field']}, generation "
        f"{found['generation']}; made from {how}" + (f" ({examples} examples)" if examples else "")
    )
    metrics = found["metrics"]
    if metrics.get("accuracy") is not None:
        typer.echo(f"validation accuracy {metrics['accuracy']:.4f}")
    cells = [[r["label"], r["description"] or ""] for r in found["labels"]]
    typer.echo(table(cells, ["label", "description"]))


@command(argument("name", str, "Head to relabel."), BUNDLE, LABELS, LABELS_FILE, JSON)
def heads_relabel(**options: Any) -> None:
    """Change the descriptions of a head made from label names ('NAME: DESCRIPTION') and
    build it again (from its examples too, when it has learnt from some)."""
    name, bundle, as_json = take(options, "name", "bundle", "as_json")
    found = jobs.relabel(bundle, name, **options)
    if as_json:
        typer.echo(json.dumps(found))
        return
    _print_head(found)
