"""Labelling rows: each row's text judged (a bad row gets a reason, never stops the
job), the good ones answered by every head a batch at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._settings import Settings
from .._text import unicode_problem
from ..bundle import Bundle
from ..bundle.pieces import check_long_texts, check_max_chars
from ..errors import positive_int
from ..heads.decode import Scores, check_scores
from ..heads.kinds import kind_of
from ..heads.tree import check_top_k
from .formats import Columns

__all__ = ["LabelSettings", "Labeller", "label_rows"]


@dataclass(frozen=True)
class LabelSettings(Settings):
    """What a labelling job does, the same on either engine (the options of
    :func:`~manyheads.label.job.label_file`, described there)."""

    heads: Sequence[str] | None = None
    text_field: str = "text"
    id_field: str | None = None
    batch_size: int = 256
    output_format: str | None = None
    input_format: str | None = None
    scores: str = "top"
    top_k: int | None = None
    tier: int | None = None
    max_chars: int = 100_000
    long_texts: str = "refuse"
    restart: bool = False
    device: str = "auto"
    gpu_batch_size: int = 16_384

    def rows(self) -> dict[str, Any]:
        """The settings that change what a row's answer is (what a job's record
        keeps, with the formats)."""
        kept = ("text_field", "id_field", "batch_size", "scores", "tier", "max_chars", "long_texts")
        found = {name: getattr(self, name) for name in kept}
        if self.top_k is not None:  # jobs of earlier versions had none
            found["top_k"] = self.top_k
        return found


@dataclass(frozen=True)
class Labeller:
    """How rows are labelled: the bundle and its heads, where a row's text is, how long
    a text may be (``long_texts``: over ``max_chars``, a bad row, or read in pieces), how
    many texts go through the trunk at once, and which scores an answer keeps."""

    bundle: Bundle
    heads: tuple[str, ...]
    text_field: str = "text"
    max_chars: int = 100_000
    long_texts: str = "refuse"
    batch_size: int = 256
    scores: Scores = "top"

    def __post_init__(self) -> None:
        check_long_texts(self.long_texts)
        check_max_chars(self.max_chars)
        positive_int(self.batch_size, "batch_size")
        check_scores(self.scores)

    @classmethod
    def of(cls, bundle: Bundle, heads: tuple[str, ...], settings: LabelSettings) -> Labeller:
        """The labeller of a job's ``settings``: ``batch_size`` texts a trunk pass, or
        ``gpu_batch_size`` where the bundle's trunk runs on a GPU."""
        s = settings
        positive_int(s.gpu_batch_size, "gpu_batch_size")
        size = s.gpu_batch_size if bundle.trunk.device.accelerated else s.batch_size
        scores: Scores = s.scores
        if s.top_k is not None:  # each answer's best k labels
            scores = check_scores(s.top_k)
            specs = bundle.fused_heads.specs if bundle.fused_heads is not None else {}
            for name in heads:
                spec = specs.get(name)
                if spec is not None and spec.trees:
                    check_top_k(s.top_k, len(spec.labels), name)
        return cls(bundle, heads, s.text_field, s.max_chars, s.long_texts, size, scores)

    def columns(self, inputs: list[str]) -> Columns:
        """The output's columns: ``inputs``, then each head's (a list of labels for a
        multilabel or hierarchical head)."""
        listed = {h for h in self.heads if kind_of(self.bundle.head_info[h]["kind"]).is_set}
        return Columns(inputs, list(self.heads), listed)

    def problem(self, row: Any) -> str | None:
        """Why ``row`` cannot be labelled (its text missing, not text, empty, too long,
        not valid Unicode), or None."""
        if not isinstance(row, dict):
            return "not a row of named fields"
        if self.text_field not in row or row[self.text_field] is None:
            return f"no field {self.text_field!r}"
        text = row[self.text_field]
        if not isinstance(text, str):
            return f"field {self.text_field!r} is {type(text).__name__}, not text"
        if not text.strip():
            return f"field {self.text_field!r} is empty"
        too_long = self.too_long(text)
        if too_long is not None:
            return f"field {self.text_field!r} {too_long}"
        return unicode_problem(text)

    def too_long(self, text: str) -> str | None:
        """``has N characters, over the limit of M``: a text over ``max_chars`` when long
        texts are refused (not read in pieces), else None."""
        if self.long_texts == "refuse" and len(text) > self.max_chars:
            return f"has {len(text)} characters, over the limit of {self.max_chars}"
        return None

    def answer(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """Every head's answer for each text (its scores kept as ``scores`` says)."""
        window = self.max_chars if self.long_texts == "window" else None
        out: list[dict[str, Any]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            out += self.bundle.predict(
                batch, heads=list(self.heads), max_chars=window, scores=self.scores
            )
        return out

    def label(
        self, rows: Sequence[Any], problems: dict[int, str] | None = None
    ) -> tuple[list[dict[str, Any] | None], list[str | None]]:
        """``(answers, reasons)`` for ``rows``: a row's answers, or None and the reason it
        is a bad row (``problems``: reasons already known, by position)."""
        reasons = [(problems or {}).get(i) or self.problem(r) for i, r in enumerate(rows)]
        good = [i for i, reason in enumerate(reasons) if reason is None]
        answered = iter(self.answer([rows[i][self.text_field] for i in good]))
        answers: list[dict[str, Any] | None] = [
            next(answered) if reason is None else None for reason in reasons
        ]
        return answers, reasons


def label_rows(
    bundle: Bundle,
    rows: Iterable[Any],
    *,
    heads: Sequence[str] | None = None,
    text_field: str = "text",
    max_chars: int = 100_000,
    long_texts: str = "refuse",
    batch_size: int = 256,
    scores: str = "top",
) -> Iterator[tuple[Any, dict[str, Any] | None, str | None]]:
    """``(row, answers, reason)`` for each row of ``rows`` (dicts holding ``text_field``,
    or plain strings), in order, a batch at a time: ``answers`` is ``{head: answer}``,
    or None with the ``reason`` a row cannot be labelled (it never stops the others)."""
    labeller = Labeller(
        bundle, tuple(bundle.resolve_heads(heads)), text_field, max_chars, long_texts,
        batch_size, scores,
    )  # fmt: skip
    batch: list[Any] = []

    def flush() -> Iterator[tuple[Any, dict[str, Any] | None, str | None]]:
        as_rows = [{text_field: r} if isinstance(r, str) else r for r in batch]
        answers, reasons = labeller.label(as_rows)
        yield from zip(batch, answers, reasons, strict=True)

    for row in rows:
        batch.append(row)
        if len(batch) >= batch_size:
            yield from flush()
            batch = []
    if batch:
        yield from flush()
