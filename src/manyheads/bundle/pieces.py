"""Reading a long text as pieces (``max_chars``): cut at whitespace where there is
some; the pieces' probabilities averaged by length."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import one_of, positive_int

__all__ = [
    "LONG_TEXTS",
    "check_long_texts",
    "check_max_chars",
    "mean_of_pieces",
    "pieces_of",
    "split_text",
]

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


def pieces_of(
    texts: list[str], max_chars: int | None
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """``texts`` with each one longer than ``max_chars`` cut into pieces
    (:func:`split_text`), the text each piece belongs to and its share of that text's
    length; ``None`` when no text is longer (or no ``max_chars``)."""
    if max_chars is None or all(len(t) <= check_max_chars(max_chars) for t in texts):
        return None
    pieces: list[str] = []
    owner: list[int] = []
    for i, text in enumerate(texts):
        parts = split_text(text, max_chars)
        pieces.extend(parts)
        owner.extend([i] * len(parts))
    owners = np.asarray(owner, dtype=np.int64)
    share = np.array([len(p) for p in pieces], dtype=np.float64)
    share /= np.bincount(owners, weights=share, minlength=len(texts))[owners]
    return pieces, owners, share


def mean_of_pieces(
    probs: Mapping[str, np.ndarray], owner: np.ndarray, share: np.ndarray, n_texts: int
) -> dict[str, np.ndarray]:
    """Each text's probabilities: its pieces' (``probs``), weighted by ``share``."""
    out: dict[str, Any] = {}
    for name, p in probs.items():
        if sp.issparse(p):  # a tree head's best labels: the pieces' union, weighted
            weigh = sp.csr_matrix((share, (owner, np.arange(len(owner)))), (n_texts, p.shape[0]))
            out[name] = sp.csr_matrix(weigh @ p, dtype=np.float32)
            continue
        mean = np.zeros((n_texts, p.shape[1]), dtype=np.float64)
        np.add.at(mean, owner, p * share[:, None])
        out[name] = mean.astype(np.float32)
    return out
