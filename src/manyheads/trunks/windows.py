"""Token windows: long texts are split, never cut (shared by the torch and ONNX paths)."""

from __future__ import annotations

from typing import Any

import numpy as np


def token_windows(
    tokenizer: Any, texts: list[str], limit: int
) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """Token windows of ``texts``, the text each belongs to, and each window's weight.

    Texts of at most ``limit`` tokens are one window; longer ones are split
    into windows of ``limit`` tokens overlapping by a quarter, each keeping the
    tokenizer's special tokens, weighted by their count of text tokens.
    """
    encodings = tokenizer.encode_batch(texts, add_special_tokens=True)
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
            if start + width >= len(body):
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
