"""What the commands share: option types, reading ``--heads``, printing tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .. import jobs
from ..bundle import BUILTIN_BUNDLES, has_bundle


def bundle_note(value: str | None) -> str | None:
    """Say which bundle answers when a built-in name is also a folder here."""
    name = jobs.DEFAULT_BUNDLE if value is None else value
    if name in BUILTIN_BUNDLES and has_bundle(Path(name)):
        typer.echo(
            f"manyheads: note: {name!r} is the built-in bundle; the bundle folder ./{name} "
            f"here is used when written as a path: -b ./{name}",
            err=True,
        )
    return value


TASK_HELP = (
    "A head to train: NAME[=FIELD][:KIND], FIELD defaulting to NAME and KIND to "
    "multiclass (or binary, multilabel), e.g. topic, lang=language, tags:multilabel; "
    "repeat for more heads."
)
# a string, not a Path: "./content" (a folder) and "content" (the built-in) differ
BundleOpt = Annotated[
    str,
    typer.Option(
        "--bundle",
        "-b",
        help=f"Bundle folder (a built-in bundle by name: {', '.join(BUILTIN_BUNDLES)}).",
        callback=bundle_note,
    ),
]
AnyBundleOpt = Annotated[
    str | None,
    typer.Option(
        "--bundle",
        "-b",
        help=f"Bundle folder, or a built-in bundle: {', '.join(BUILTIN_BUNDLES)} "
        f"(default: {jobs.DEFAULT_BUNDLE}); a folder named like one is written "
        "as a path (./content).",
        callback=bundle_note,
    ),
]
TierOpt = Annotated[
    int | None,
    typer.Option(
        "--tier",
        help="Byte bundles: the tier (embedding size) to answer at (default: the bundle's).",
    ),
]
TextFieldOpt = Annotated[str, typer.Option("--text-field", help="Field holding the text.")]
HeadsOpt = Annotated[
    str | None, typer.Option("--heads", help="Comma-separated subset of heads (default: all).")
]
CacheDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Embedding cache folder (default: $MANYHEADS_CACHE_DIR or the user cache folder).",
    ),
]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not use the embedding cache.")]
MaxCharsOpt = Annotated[
    int, typer.Option("--max-chars", help="Most characters in one text (see --long-texts).")
]
LongTextsOpt = Annotated[
    str,
    typer.Option(
        "--long-texts",
        help="Texts over --max-chars: 'refuse' (an error naming the text) or 'window' (read "
        "in pieces of --max-chars, probabilities averaged).",
    ),
]
MaxLabelsOpt = Annotated[
    int, typer.Option("--max-labels", help="Most labels (classes) of one head.")
]
LabelSepOpt = Annotated[
    str, typer.Option("--label-sep", help="Separator of multilabel fields given as strings.")
]


def split_names(heads: str | None) -> list[str] | None:
    if heads is None:
        return None
    names = [h.strip() for h in heads.split(",") if h.strip()]
    if not names:
        raise typer.BadParameter("--heads needs at least one head name")
    return names


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def trunk_line(summary: Any) -> str:
    """The byte trunk's training: time, loss per epoch, learned task weights."""
    losses = ", ".join(f"{v:.4f}" for v in summary.losses)
    weights = ", ".join(f"{n} {w:.3f}" for n, w in summary.task_weights.items())
    return (
        f"trained byte trunk in {summary.seconds:.1f} s ({summary.epochs} epochs, "
        f"{summary.steps} steps; loss per epoch: {losses}; task weights: {weights})"
    )


def tiers_table(tiers: dict[int, list[Any]]) -> str:
    """Validation metrics of the heads fitted at a byte bundle's other tiers."""
    rows = [
        [
            s.name,
            tier,
            s.metrics.get("accuracy"),
            s.metrics.get("macro_f1"),
            s.metrics.get("micro_f1"),
            s.metrics.get("ece"),
        ]
        for tier, summaries in tiers.items()
        for s in summaries
    ]
    header = ["head", "tier", "val_acc", "val_macro_f1", "val_micro_f1", "val_ece"]
    return table(rows, header)


def summary_table(summaries: list[Any]) -> str:
    """One line per trained head: sizes, validation metrics, seconds."""
    rows = [
        [
            s.name,
            s.kind,
            s.n_classes,
            s.n_train,
            s.n_val,
            s.metrics.get("accuracy"),
            s.metrics.get("macro_f1"),
            s.metrics.get("micro_f1"),
            s.metrics.get("ece"),
            round(s.seconds, 2),
        ]
        for s in summaries
    ]
    header = [
        "head",
        "kind",
        "classes",
        "train",
        "val",
        "val_acc",
        "val_macro_f1",
        "val_micro_f1",
        "val_ece",
        "seconds",
    ]
    return table(rows, header)
