"""``manyheads predict``: answering texts with every head."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from .. import jobs
from .common import split_names
from .options import (
    ANY_BUNDLE,
    DEVICE,
    HEADS,
    LONG_TEXTS,
    MAX_CHARS,
    TEXT_FIELD,
    TIER,
    argument,
    command,
    option,
)


def answer_cell(name: str, answer: dict[str, Any]) -> str:
    """``head: label 0.98``, ``head: a 0.91, b 0.62`` (multilabel), ``head: -`` (none)."""
    if "labels" in answer:
        scores = answer.get("scores", {})
        picked = [
            f"{lab} {scores[lab]:.2f}" if lab in scores else str(lab) for lab in answer["labels"]
        ]
        return f"{name}: {', '.join(picked) or '-'}"
    if answer["label"] is None:
        return f"{name}: -"
    return f"{name}: {answer['label']} {answer['score']:.2f}"


def compact(number: int, text: str, answer: dict[str, Any]) -> str:
    """One line per text for a terminal: its number, its start, each head's answer."""
    preview = json.dumps(text[:37] + ("..." if len(text) > 37 else ""), ensure_ascii=False)
    cells = "  ".join(answer_cell(n, a) for n, a in answer.items())
    return f"{number:>3}  {preview:<42}  {cells}"


@command(
    argument("texts", list[str] | None, "Texts to classify.", None),
    ANY_BUNDLE,
    option(
        "input_file",
        Path | None,
        "--input -i",
        "CSV/TSV/JSONL/Parquet (--text-field) or plain text, one text per line.",
        None,
    ),
    TEXT_FIELD,
    HEADS,
    TIER,
    DEVICE,
    MAX_CHARS,
    LONG_TEXTS,
    option(
        "as_json",
        bool,
        "--json",
        "JSON lines even on a terminal (always when the output is piped).",
        False,
    ),
    option(
        "scores",
        str | None,
        "--scores",
        "Class scores in the JSON lines: all (default), top (the best five) or none; implies "
        "--json.",
        None,
    ),
)
def predict(**options: Any) -> None:
    """Answer each text with every head: one compact line per text on a terminal, one
    JSON line per text when piped or with --json (a file is read as it goes)."""
    scores = options.pop("scores")
    as_json = options.pop("as_json") or scores is not None or not sys.stdout.isatty()
    rows = jobs.predict_rows(
        options.pop("bundle") or jobs.DEFAULT_BUNDLE,
        options.pop("texts") or [],
        heads=split_names(options.pop("heads")),
        **options,
        scores=scores or "all",
    )
    for number, (text, answer) in enumerate(rows, 1):
        line = json.dumps(answer, ensure_ascii=False) if as_json else compact(number, text, answer)
        typer.echo(line)
