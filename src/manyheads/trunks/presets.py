"""The trunks named by a word: ``minilm``, ``hashing``, ``tfidf`` (a hashing trunk's
named configurations), ``ngram`` (the fast n-gram trunk), ``static`` (a table distilled
from MiniLM) and ``fast`` (``static+ngram``)."""

from __future__ import annotations

from typing import Any

__all__ = ["COMPOSITE_PRESETS", "HASHING_PRESETS", "TRUNK_NAMES"]

TRUNK_NAMES = ("minilm", "hashing", "tfidf", "ngram", "static", "fast")

# names that stand for a composite
COMPOSITE_PRESETS: dict[str, str] = {"fast": "static+ngram"}

# named hashing configurations
HASHING_PRESETS: dict[str, dict[str, Any]] = {
    "hashing": {},
    # TF-IDF without a vocabulary: character 1-5-grams, sublinear tf, idf fitted on training texts
    "tfidf": {"dim": 2**14, "ngram_range": (1, 5), "idf": True},
}
