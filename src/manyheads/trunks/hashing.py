"""A character n-gram hashing trunk: no pretrained weights, no torch.

Each text becomes a hashed bag of character n-grams (word-boundary aware by
default), with sublinear term frequencies, optionally weighted by an inverse
document frequency fitted on training texts (TF-IDF without a vocabulary),
then L2-normalised. It is fast, deterministic, and strong on tasks that
depend on surface form (language, code, product names).

With ``idf=True`` the trunk must be fitted (:meth:`fit`) before it encodes;
the idf vector is part of its state and of its fingerprint, so heads trained
on it cannot be used with a differently fitted one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer

from ..errors import ConfigError
from .base import check_texts
from .idf import IdfTrunk

_VERSION = 2
_ANALYZERS = ("char_wb", "char", "word")


class HashingTrunk(IdfTrunk):
    """Hashing of character (or word) n-grams into ``dim`` buckets.

    Parameters
    ----------
    dim : int
        Number of hash buckets (width of the vectors).
    ngram_range : (int, int)
        Smallest and largest n-gram length.
    analyzer : {"char_wb", "char", "word"}
        ``char_wb``: character n-grams inside word boundaries (padded with spaces).
    lowercase : bool
    idf : bool
        Weight buckets by ``log((1 + n) / (1 + df)) + 1`` fitted on training texts.
    signed : bool
        Alternate the sign of hashed features so collisions cancel on average
        (only without idf: with idf the counts stay non-negative).
    """

    cacheable = False  # recomputing is cheaper than reading wide vectors back
    _spec_version = _VERSION
    _spec_fields = ("analyzer", "lowercase", "idf", "signed")
    type_name = "hashing"

    def __init__(
        self,
        dim: int = 2048,
        ngram_range: tuple[int, int] = (1, 4),
        analyzer: str = "char_wb",
        lowercase: bool = True,
        idf: bool = False,
        signed: bool = True,
        batch_size: int = 4096,
    ) -> None:
        if not isinstance(dim, int) or not 8 <= dim <= 2**22:
            raise ConfigError(f"hashing trunk dim must be an integer in [8, 4194304], got {dim!r}")
        lo, hi = ngram_range
        if not 1 <= lo <= hi <= 10:
            raise ConfigError(f"ngram_range must satisfy 1 <= lo <= hi <= 10, got {ngram_range!r}")
        if analyzer not in _ANALYZERS:
            raise ConfigError(f"analyzer must be one of {_ANALYZERS}, got {analyzer!r}")
        self._dim = dim
        self.ngram_range = (int(lo), int(hi))
        self.analyzer = analyzer
        self.lowercase = bool(lowercase)
        self.idf = bool(idf)
        self.signed = bool(signed) and not self.idf
        self.batch_size = batch_size
        self._vec = HashingVectorizer(
            analyzer=analyzer,
            ngram_range=self.ngram_range,
            n_features=dim,
            alternate_sign=self.signed,
            norm=None,
            lowercase=self.lowercase,
            dtype=np.float32,
        )
        self.idf_: np.ndarray | None = None
        self._hashed: str | None = None  # the fingerprint, worked out on first use
        self._preset: str | None = None  # the name, worked out on first use

    @property
    def name(self) -> str:
        """The named configuration this trunk has the settings of (``tfidf``), else
        ``hashing``."""
        from .presets import HASHING_PRESETS

        if self._preset is None:
            mine = self._config()
            found = [n for n, p in HASHING_PRESETS.items() if HashingTrunk(**p)._config() == mine]
            self._preset = found[0] if found else "hashing"
        return self._preset

    def _bucket_rows(self, texts: list[str]) -> Iterable[np.ndarray]:
        for start in range(0, len(texts), self.batch_size):
            yield self._vec.transform(texts[start : start + self.batch_size]).indices

    def encode_features(self, texts: Sequence[str], *, progress: bool = False) -> sp.csr_matrix:
        """Rows as a sparse CSR float32 matrix, L2-normalised."""
        texts = check_texts(texts)
        self._check_fitted()
        blocks = []
        for start in range(0, len(texts), self.batch_size):
            m = self._vec.transform(texts[start : start + self.batch_size]).tocsr()
            m.data = np.sign(m.data) * np.log1p(np.abs(m.data))  # sublinear tf
            if self.idf_ is not None:
                m = m @ sp.diags(self.idf_)
            blocks.append(m.astype(np.float32))
        out = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, self._dim))
        norms = np.sqrt(np.asarray(out.multiply(out).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sp.csr_matrix(sp.diags(1.0 / norms) @ out, dtype=np.float32)

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        return np.asarray(self.encode_features(texts).toarray(), dtype=np.float32)

    encode_sparse = encode_features  # the earlier name

    def __repr__(self) -> str:
        return (
            f"HashingTrunk(dim={self._dim}, ngram_range={self.ngram_range}, "
            f"analyzer={self.analyzer!r}, idf={self.idf})"
        )
