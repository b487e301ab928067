"""The trunks named by a word: ``minilm``, ``hashing``, ``tfidf`` (a hashing trunk's
named configurations)."""

from __future__ import annotations

from typing import Any

__all__ = ["HASHING_PRESETS", "TRUNK_NAMES"]

TRUNK_NAMES = ("minilm", "hashing", "tfidf")

# named hashing configurations
HASHING_PRESETS: dict[str, dict[str, Any]] = {
    "hashing": {},
    # TF-IDF without a vocabulary: character 1-5-grams, sublinear tf, idf fitted on training texts
    "tfidf": {"dim": 2**14, "ngram_range": (1, 5), "idf": True},
}
