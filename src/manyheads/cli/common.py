"""What the commands share besides their options: reading ``--heads``, printing tables."""

from __future__ import annotations

from typing import Any

import typer


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
