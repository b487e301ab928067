"""manyheads: one shared encoder (the trunk), many small heads, every answer from one pass.

>>> import manyheads
>>> b = manyheads.Bundle(trunk="hashing")
>>> b.fit_head("topic", texts, labels)             # doctest: +SKIP
>>> b.predict(["some text"])                       # doctest: +SKIP
"""

__version__ = "0.1.0"

from .bundle import Bundle, HeadSummary  # noqa: E402
from .cache import EmbeddingCache  # noqa: E402
from .data import Dataset, LabelSpec, load_dataset, read_texts, split_indices  # noqa: E402
from .errors import (  # noqa: E402
    BundleError,
    ConfigError,
    DataError,
    FingerprintMismatchError,
    ManyheadsError,
    MissingDependencyError,
    UnknownHeadError,
)
from .heads import KINDS, FusedHeads, LinearHead  # noqa: E402
from .trunks import HashingTrunk, TransformerTrunk, Trunk, load_trunk  # noqa: E402

__all__ = [
    "KINDS",
    "Bundle",
    "BundleError",
    "ConfigError",
    "DataError",
    "Dataset",
    "EmbeddingCache",
    "FingerprintMismatchError",
    "FusedHeads",
    "HashingTrunk",
    "HeadSummary",
    "LabelSpec",
    "LinearHead",
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
