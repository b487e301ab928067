"""A character n-gram hashing trunk: no pretrained weights, no torch.

Each text becomes a signed, hashed bag of character n-grams (word-boundary
aware, sublinear counts), L2-normalised. It is fast, deterministic, and a
strong baseline for tasks that depend on surface form (language, code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer

from ..errors import ConfigError
from .base import check_texts, config_fingerprint, l2_normalise

_VERSION = 1


class HashingTrunk:
    """Signed hashing of character n-grams into ``dim`` buckets."""

    def __init__(
        self,
        dim: int = 2048,
        ngram_range: tuple[int, int] = (1, 4),
        lowercase: bool = True,
        batch_size: int = 4096,
    ) -> None:
        if not isinstance(dim, int) or dim < 8:
            raise ConfigError(f"hashing trunk dim must be an integer >= 8, got {dim!r}")
        lo, hi = ngram_range
        if not 1 <= lo <= hi <= 10:
            raise ConfigError(f"ngram_range must satisfy 1 <= lo <= hi <= 10, got {ngram_range!r}")
        self.name = "hashing"
        self._dim = dim
        self.ngram_range = (int(lo), int(hi))
        self.lowercase = bool(lowercase)
        self.batch_size = batch_size
        self._vec = HashingVectorizer(
            analyzer="char_wb",
            ngram_range=self.ngram_range,
            n_features=dim,
            alternate_sign=True,
            norm=None,
            lowercase=self.lowercase,
            dtype=np.float32,
        )
        self._fingerprint = config_fingerprint("hashing", self._config())

    def _config(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "dim": self._dim,
            "ngram_range": list(self.ngram_range),
            "lowercase": self.lowercase,
        }

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def spec(self) -> dict[str, Any]:
        return {"type": "hashing", **self._config()}

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        step = batch_size or self.batch_size
        for start in range(0, len(texts), step):
            m = self._vec.transform(texts[start : start + step])
            # sublinear term frequency, keeping the hash sign
            m.data = np.sign(m.data) * np.log1p(np.abs(m.data))
            out[start : start + step] = m.toarray()
        return l2_normalise(out)

    def __repr__(self) -> str:
        return f"HashingTrunk(dim={self._dim}, ngram_range={self.ngram_range})"
