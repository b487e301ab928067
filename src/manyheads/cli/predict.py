"""``manyheads predict``: answering texts with every head."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import jobs
from .common import (
    AnyBundleOpt,
    HeadsOpt,
    LongTextsOpt,
    MaxCharsOpt,
    TextFieldOpt,
    TierOpt,
    arg,
    opt,
    split_names,
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


def predict(
    texts: Annotated[list[str] | None, arg("predict:texts")] = None,
    bundle: AnyBundleOpt = None,
    input_file: Annotated[Path | None, opt("--input", "-i")] = None,
    text_field: TextFieldOpt = "text",
    heads: HeadsOpt = None,
    tier: TierOpt = None,
    max_chars: MaxCharsOpt = 100000,
    long_texts: LongTextsOpt = "refuse",
    as_json: Annotated[bool, opt("predict:--json")] = False,
    scores: Annotated[str | None, opt("--scores")] = None,
) -> None:
    """Answer each text with every head: one compact line per text on a terminal, one
    JSON line per text when piped or with --json (a file is read as it goes)."""
    as_json = as_json or scores is not None or not sys.stdout.isatty()
    rows = jobs.predict_rows(
        bundle or jobs.DEFAULT_BUNDLE,
        texts or [],
        input_file=input_file,
        text_field=text_field,
        heads=split_names(heads),
        tier=tier,
        max_chars=max_chars,
        long_texts=long_texts,
        scores=scores or "all",
    )
    for number, (text, answer) in enumerate(rows, 1):
        line = json.dumps(answer, ensure_ascii=False) if as_json else compact(number, text, answer)
        typer.echo(line)
