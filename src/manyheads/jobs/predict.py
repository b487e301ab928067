"""Answering the texts of a file (and texts given), a batch at a time: the job behind
``manyheads predict``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..bundle.pieces import check_long_texts, check_max_chars
from ..data import iter_texts
from ..errors import ConfigError, DataError
from ..heads.decode import Scores, check_scores
from ..label.rows import Labeller
from .options import open_bundle

__all__ = ["predict_rows", "predict_texts"]


def predict_texts(
    bundle_path: str | Path, texts: Sequence[str] = (), **options: Any
) -> Iterator[dict[str, Any]]:
    """Answers for the given texts, then the texts of a file, in order: the answers of
    :func:`predict_rows` without their texts."""
    for _, answer in predict_rows(bundle_path, texts, **options):
        yield answer


def predict_rows(
    bundle_path: str | Path,
    texts: Sequence[str] = (),
    *,
    input_file: str | Path | None = None,
    text_field: str = "text",
    heads: Sequence[str] | None = None,
    batch_size: int = 256,
    tier: int | None = None,
    max_chars: int = 100_000,
    long_texts: str = "refuse",
    scores: Scores = "all",
    device: str = "auto",
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(text, answer)`` for the given texts, then the texts of a file, in order, read
    and answered a batch at a time (``tier``: a byte bundle's heads at that tier;
    ``scores``: each head's class scores ``all``, the ``top`` five, or ``none``;
    ``device``: where the trunk runs).

    A text longer than ``max_chars`` is refused (``long_texts="refuse"``: a
    :class:`DataError` naming it, after the answers before it) or read in pieces of
    at most ``max_chars`` characters whose probabilities are averaged
    (``"window"``), as the service does.
    """
    check_long_texts(long_texts)
    check_max_chars(max_chars)
    if not texts and input_file is None:
        raise ConfigError(
            "nothing to predict: give {texts} or {input_file}", options=("texts", "input_file")
        )
    check_scores(scores)
    bundle = open_bundle(bundle_path, no_cache=True, tier=tier, device=device)
    labeller = Labeller(
        bundle, tuple(bundle.resolve_heads(heads)), text_field, max_chars, long_texts,
        max(1, batch_size), scores,
    )  # fmt: skip

    def located() -> Iterator[tuple[str, str]]:
        for i, text in enumerate(texts):
            yield f"text #{i + 1}", text
        if input_file is not None:
            yield from iter_texts(input_file, text_field=text_field, empty=True)

    def answered(batch: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from zip(batch, labeller.answer(batch), strict=True)

    batch: list[str] = []
    chars = 0
    for where, text in located():
        too_long = labeller.too_long(text)
        if too_long is not None:
            yield from answered(batch)
            raise DataError(
                f"{where} {too_long} (raise the limit, or read long texts in pieces: "
                "the window mode)"
            )
        batch.append(text)
        chars += len(text)
        if len(batch) >= batch_size or chars >= 4 * max_chars:
            yield from answered(batch)
            batch, chars = [], 0
    if batch:
        yield from answered(batch)
