"""The path from texts to answers, as functions of one head-set snapshot: trunk vectors
through the embedding cache (:func:`cached_features`), answers of texts read whole
or in pieces (:func:`answers_of`), and the vectors answered, for who watches them
(:func:`vectors_seen`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..cache import EmbeddingCache
from ..heads import FusedHeads
from ..heads.decode import Scores
from ..trunks import Features, TrunkBase
from .pieces import mean_of_pieces, pieces_of

__all__ = ["answers_of", "cached_features", "saw", "vectors_seen"]

Probabilities = Callable[[list[str]], "dict[str, np.ndarray]"]

_SEEN: ContextVar[list[Features] | None] = ContextVar("manyheads_vectors_seen", default=None)


@contextmanager
def vectors_seen() -> Iterator[list[Features]]:
    """Within the block, the trunk's vectors of the texts that predictions (in this
    thread, or this task) answer: one block of rows a trunk pass, added to the list
    given. A blank text has none; a text read in pieces gives its pieces'; a trunk that
    computes the heads' first layer on a GPU gives none (only the product comes back)."""
    found: list[Features] = []
    token = _SEEN.set(found)
    try:
        yield found
    finally:
        _SEEN.reset(token)


def saw(X: Features | None) -> None:
    """Hand the vectors of a trunk pass to :func:`vectors_seen`'s list, if one is open."""
    found = _SEEN.get()
    if found is not None and X is not None:
        found.append(X)


def answers_of(
    fused: FusedHeads,
    texts: list[str],
    names: list[str],
    probabilities: Probabilities,
    max_chars: int | None,
    scores: Scores,
) -> list[dict[str, Any]]:
    """Each text's answers from ``probabilities`` of the texts (of their pieces, weighted
    by length, when ``max_chars`` cuts a text into pieces)."""
    cut = pieces_of(texts, max_chars)
    if cut is None:
        return fused.answers(probabilities(texts), names, scores)
    pieces, owner, share = cut
    probs = mean_of_pieces(probabilities(pieces), owner, share, len(texts))
    return fused.answers(probs, names, scores)


def cached_features(
    trunk: TrunkBase, texts: list[str], cache: EmbeddingCache | None, progress: bool
) -> Features:
    """Trunk vectors of ``texts``; with a cache, only texts unseen by the trunk (or, for a
    composite trunk, by each of its cacheable parts) reach it."""
    if cache is None:
        return trunk.encode_features(texts, progress=progress)
    return trunk.combine([_part_features(p, texts, cache, progress) for p in trunk.parts])


def _part_features(
    part: TrunkBase, texts: list[str], cache: EmbeddingCache, progress: bool
) -> Features:
    if not part.cacheable:
        return part.encode_features(texts, progress=progress)
    fp, dim = part.cache_key, int(part.dim)
    found = cache.get(fp, texts, dim)
    todo = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
    fresh: dict[str, np.ndarray] = {}
    if todo:
        vecs = part.encode(todo, progress=progress)
        cache.put(fp, todo, vecs)
        # round-trip through the storage type so cached and fresh runs agree exactly
        vecs = vecs.astype(np.float16 if cache.dtype == "float16" else np.float32)
        fresh = dict(zip(todo, vecs.astype(np.float32), strict=True))
    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, (t, v) in enumerate(zip(texts, found, strict=True)):
        out[i] = v if v is not None else fresh[t]
    return out
