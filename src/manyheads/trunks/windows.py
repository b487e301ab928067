"""Token windows: long texts are split, not cut, unless a trunk is set to truncate
(shared by the torch and ONNX paths); their encoding a few windows at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import one_of
from .base import Encoding, l2_normalise

# what a transformer trunk does with a text longer than its window: read it whole, in
# overlapping windows averaged (the default), or read its first window only
OVERFLOW = ("windows", "truncate")


def check_overflow(overflow: object) -> str:
    return one_of(overflow, OVERFLOW, "overflow")


def token_windows(
    tokenizer: Any, texts: list[str], limit: int, overflow: str = "windows"
) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """Token windows of ``texts``, the text each belongs to, and each window's weight.

    Texts of at most ``limit`` tokens are one window; longer ones are split
    into windows of ``limit`` tokens overlapping by a quarter, each keeping the
    tokenizer's special tokens, weighted by their count of text tokens. ``overflow``
    ``"truncate"``: a longer text is its first window only (the rest of it is not read).
    """
    truncate = overflow == "truncate"  # checked where the trunk is made
    # the batch encode without character offsets (not needed here): the same ids and
    # special-token masks, ~15% faster
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=True)
    windows = [enc.ids for enc in encodings]
    long = [i for i, w in enumerate(windows) if len(w) > limit]
    if not long:
        n = len(windows)
        return windows, np.arange(n, dtype=np.int64), np.ones(n, dtype=np.float32)
    out: list[list[int]] = []
    owners: list[int] = []
    weights: list[float] = []
    for i, ids in enumerate(windows):
        if len(ids) <= limit:
            out.append(ids)
            owners.append(i)
            weights.append(1.0)
            continue
        head, tail = special_span(encodings[i])
        prefix, body, suffix = ids[:head], ids[head:tail], ids[tail:]
        width = limit - len(prefix) - len(suffix)
        stride = max(1, width - width // 4)
        start = 0
        while True:
            piece = body[start : start + width]
            out.append(prefix + piece + suffix)
            owners.append(i)
            weights.append(float(len(piece)))
            if truncate or start + width >= len(body):
                break
            start += stride
    return out, np.asarray(owners, dtype=np.int64), np.asarray(weights, dtype=np.float32)


def special_span(encoding: Any) -> tuple[int, int]:
    """``(head, tail)``: the text's tokens are ``ids[head:tail]``, between the special
    tokens a tokenizer's template puts before and after them."""
    special = encoding.special_tokens_mask
    n = len(special)
    head = 0
    while head < n and special[head]:
        head += 1
    tail = n
    while tail > head and special[tail - 1]:
        tail -= 1
    return head, tail


def padded(windows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, attention mask)`` of ``windows``, padded with 0 to the longest."""
    width = max(len(w) for w in windows)
    ids = np.zeros((len(windows), width), dtype=np.int64)
    mask = np.zeros((len(windows), width), dtype=np.int64)
    for row, w in enumerate(windows):
        ids[row, : len(w)] = w
        mask[row, : len(w)] = 1
    return ids, mask


def length_batches(lengths: np.ndarray, *, max_tokens: int, max_rows: int) -> list[np.ndarray]:
    """Indices sorted by length, cut into batches of at most ``max_rows`` rows and
    ``max_tokens`` padded tokens (a longer single row is a batch of its own)."""
    order = np.argsort(lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        stop = start + 1
        while stop < n and stop - start < max_rows:
            if (stop - start + 1) * lengths[order[stop]] > max_tokens:
                break
            stop += 1
        batches.append(order[start:stop])
        start = stop
    return batches


def window_work(windows: list[list[int]], owners: np.ndarray, n_texts: int) -> list[int]:
    """The tokens of each text's windows (what encoding it costs)."""
    lengths = np.fromiter((len(w) for w in windows), dtype=np.int64, count=len(windows))
    return [int(n) for n in np.bincount(owners, weights=lengths, minlength=n_texts)]


class WindowEncoding(Encoding):
    """Texts' token windows encoded a few at a time, shortest first (little padding).

    ``run(windows)`` gives the pooled vector of each window (windows of similar
    length, a step's worth); once every window is run, a text's vector is the
    mean of its normalised windows weighted by their text tokens, normalised: what
    the trunk's ``encode`` computes, whatever the steps were. A step's budget
    counts padded tokens (windows x the longest of them).
    """

    def __init__(
        self,
        tokenized: tuple[list[list[int]], np.ndarray, np.ndarray],
        n_texts: int,
        dim: int,
        run: Callable[[list[list[int]]], np.ndarray],
    ) -> None:
        self._windows, self._owners, self._weights = tokenized
        self._n_texts = n_texts
        self._run = run
        self._lengths = np.fromiter(
            (len(w) for w in self._windows), dtype=np.int64, count=len(self._windows)
        )
        self._order = np.argsort(self._lengths, kind="stable")
        self._pooled = np.zeros((len(self._windows), dim), dtype=np.float32)
        self._next = 0
        self.work = int(self._lengths.sum())
        self.left = self.work

    @property
    def divisible(self) -> bool:
        return len(self._windows) > 1

    @property
    def done(self) -> bool:
        return self._next >= len(self._order)

    def step(self, budget: int) -> int:
        start = stop = self._next
        while stop < len(self._order) and (
            stop == start or (stop - start + 1) * self._lengths[self._order[stop]] <= budget
        ):
            stop += 1
        idx = self._order[start:stop]
        if len(idx):
            self._pooled[idx] = self._run([self._windows[j] for j in idx])
        self._next = stop
        work = int(self._lengths[idx].sum())
        self.left -= work
        return work

    def result(self) -> np.ndarray:
        if not self.done:
            raise self._not_done()
        pooled = l2_normalise(self._pooled) * self._weights[:, None]
        out = np.zeros((self._n_texts, pooled.shape[1]), dtype=np.float32)
        np.add.at(out, self._owners, pooled)
        return l2_normalise(out)
