"""Reading a long text as pieces (``max_chars``): cut at whitespace where there is
some; the pieces' probabilities are averaged by the caller."""

from __future__ import annotations

from typing import Any

from ..errors import one_of, positive_int

__all__ = ["LONG_TEXTS", "check_long_texts", "check_max_chars", "split_text"]

LONG_TEXTS = ("refuse", "window")  # a text over max_chars: refused, or read in pieces


def check_max_chars(max_chars: Any) -> int:
    return positive_int(max_chars, "max_chars")


def check_long_texts(long_texts: Any) -> str:
    return one_of(long_texts, LONG_TEXTS, "long_texts")


def split_text(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, cut at the last whitespace
    of a piece's second half where there is one (never an empty piece)."""
    check_max_chars(max_chars)
    if len(text) <= max_chars:
        return [text]
    pieces = []
    start = 0
    while len(text) - start > max_chars:
        end = start + max_chars
        cut = max(text.rfind(" ", start + max_chars // 2, end), text.rfind("\n", start, end))
        if cut <= start + max_chars // 2:
            cut = end
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces
