"""What the n-gram trunks (``hashing``/``tfidf`` and ``ngram``) share: an optional
inverse document frequency per bucket, fitted on training texts, kept as the trunk's
state and covered by its fingerprint."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import ManyheadsError
from .base import TrunkBase, check_texts, config_fingerprint

__all__ = ["IdfTrunk"]


class IdfTrunk(TrunkBase):
    """A trunk of ``dim`` buckets that may weight them by ``log((1 + n) / (1 + df)) + 1``.

    A subclass sets ``type_name`` (its spec type, named in messages), ``idf``, ``_dim``
    and ``ngram_range``, names its spec's ``_spec_version`` and other settings
    (``_spec_fields``, attributes of the same names), and answers
    ``_bucket_rows(texts)`` (the buckets each text has)."""

    idf: bool
    idf_: np.ndarray | None = None
    ngram_range: tuple[int, int]
    _hashed: str | None = None
    _spec_version: ClassVar[int] = 1
    _spec_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def spec_name(cls, options: dict[str, Any]) -> str | None:
        return cls.from_spec(options, None).name

    def _config(self) -> dict[str, Any]:
        """The spec's settings: ``version``, ``dim``, ``ngram_range``, then
        ``_spec_fields`` in order."""
        return {
            "version": self._spec_version,
            "dim": self._dim,
            "ngram_range": list(self.ngram_range),
            **{name: getattr(self, name) for name in self._spec_fields},
        }

    def _bucket_rows(self, texts: list[str]) -> Iterable[np.ndarray]:
        """For each batch of texts, the bucket of every (text, bucket) that occurs once."""
        raise NotImplementedError

    @property
    def needs_fit(self) -> bool:
        return self.idf and self.idf_ is None

    def fit(self, texts: Sequence[str]) -> IdfTrunk:
        """Fit the idf weights on ``texts`` (a no-op without ``idf``). Returns self."""
        texts = check_texts(texts)
        if not self.idf:
            return self
        if not texts:
            raise ManyheadsError(f"cannot fit the {self.type_name} trunk's idf on zero texts")
        df = np.zeros(self._dim, dtype=np.float64)
        for buckets in self._bucket_rows(texts):
            df += np.bincount(buckets, minlength=self._dim)
        self.idf_ = (np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0).astype(np.float32)
        self._hashed = None
        return self

    def state(self) -> dict[str, np.ndarray]:
        """Fitted arrays to store beside the spec (empty when there is nothing fitted)."""
        return {} if self.idf_ is None else {"idf": self.idf_}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if not self.idf:
            return
        idf = state.get("idf")
        if idf is None or idf.shape != (self._dim,):
            shape = None if idf is None else idf.shape
            raise ManyheadsError(
                f"{self.type_name} trunk state needs an 'idf' vector of shape ({self._dim},), "
                f"got {shape}"
            )
        self.idf_ = np.asarray(idf, dtype=np.float32)
        self._hashed = None

    def _check_fitted(self) -> None:
        if self.needs_fit:
            raise ManyheadsError(
                f"this {self.type_name} trunk weights n-grams by idf and must be fitted on "
                f"training texts first (train a head into a new bundle)"
            )

    @property
    def fingerprint(self) -> str:
        if self._hashed is None:
            import hashlib

            extra = [] if self.idf_ is None else [hashlib.sha256(self.idf_.tobytes()).digest()]
            self._hashed = config_fingerprint(self.type_name, self._config(), *extra)
        return self._hashed

    def spec(self) -> dict[str, Any]:
        return {"type": self.type_name, **self._config()}
