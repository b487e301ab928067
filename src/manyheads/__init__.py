"""manyheads: one shared encoder (the trunk), many small heads, every answer from one pass.

>>> import manyheads
>>> b = manyheads.Bundle(trunk="hashing")
>>> b.fit_head("topic", texts, labels)             # doctest: +SKIP
>>> b.predict(["some text"])                       # doctest: +SKIP
"""

__version__ = "0.1.0"

from .bundle import Bundle, HeadSummary
from .cache import EmbeddingCache
from .data import Dataset, LabelSpec, load_dataset, read_texts, split_indices
from .errors import (
    BundleError,
    ConfigError,
    DataError,
    FingerprintMismatchError,
    ManyheadsError,
    MissingDependencyError,
    UnknownHeadError,
)
from .heads import KINDS, FusedHeads, LinearHead
from .trunks import HashingTrunk, TransformerTrunk, Trunk, load_trunk

__all__ = [
    "KINDS",
    "Bundle",
    "BundleError",
    "CompositeTrunk",
    "ConfigError",
    "DataError",
    "Dataset",
    "EmbeddingCache",
    "FinetuneSummary",
    "FingerprintMismatchError",
    "FusedHeads",
    "HashingTrunk",
    "HeadSummary",
    "LabelSpec",
    "LinearHead",
    "MLPHead",
    "ManyheadsError",
    "MissingDependencyError",
    "TransformerTrunk",
    "Trunk",
    "UnknownHeadError",
    "__version__",
    "load_dataset",
    "load_trunk",
    "read_texts",
    "split_indices",
]
