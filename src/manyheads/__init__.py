"""manyheads: one shared encoder (the trunk), many small heads, every answer from one pass.

>>> import manyheads
>>> b = manyheads.Bundle(trunk="hashing")
>>> b.fit_head("topic", texts, labels)             # doctest: +SKIP
>>> b.predict(["some text"])                       # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_names
from ._version import __version__
from .bundle import Bundle, HeadLimits
from .cache import EmbeddingCache
from .data import Dataset, LabelSpec, load_dataset, read_texts, split_indices
from .errors import (
    BundleConflictError,
    BundleError,
    ConfigError,
    DataError,
    FingerprintMismatchError,
    ManyheadsError,
    MissingDependencyError,
    UnknownHeadError,
)
from .heads import KINDS, FusedHeads
from .trunks import CompositeTrunk, TransformerTrunk, Trunk, load_trunk

if TYPE_CHECKING:
    from .heads.linear import LinearHead
    from .heads.mlp import MLPHead, MLPTraining
    from .train import FinetuneSummary, HeadSummary
    from .trunks.hashing import HashingTrunk

# scikit-learn-backed classes and training's reports load on first use: answering from
# a saved bundle imports neither scikit-learn nor the training code
__getattr__ = lazy_names(
    __name__,
    {
        "HeadSummary": ".train",
        "FinetuneSummary": ".train",
        "LinearHead": ".heads.linear",
        "MLPHead": ".heads.mlp",
        "MLPTraining": ".heads.mlp",
        "HashingTrunk": ".trunks.hashing",
    },
)


__all__ = [
    "KINDS",
    "Bundle",
    "BundleConflictError",
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
    "HeadLimits",
    "HeadSummary",
    "LabelSpec",
    "LinearHead",
    "MLPHead",
    "MLPTraining",
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
