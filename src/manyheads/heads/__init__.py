"""Heads: small classifiers on trunk embeddings, and their fusion into one matrix.

The estimators (:class:`LinearHead`, :class:`MLPHead`) need scikit-learn and
are imported on first use; :class:`FusedHeads` and the stored head records
need numpy only, so a bundle can answer without importing scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from .._lazy import lazy_names
from .convert import any_head_from_record, any_head_to_record
from .fused import FusedHeads
from .kinds import HEAD_TYPES, KINDS, Kind, check_head_name, check_kind, check_labels, kind_of

if TYPE_CHECKING:
    from .calibration import fit_temperature, tune_binary_threshold, tune_thresholds
    from .linear import LinearHead, head_from_record, head_to_record
    from .mlp import MLPHead, MLPTraining
    from .tree_fit import TreeHead

AnyHead: TypeAlias = "LinearHead | MLPHead | TreeHead"

__all__ = [
    "HEAD_TYPES",
    "KINDS",
    "AnyHead",
    "FusedHeads",
    "Kind",
    "LinearHead",
    "MLPHead",
    "MLPTraining",
    "any_head_from_record",
    "any_head_to_record",
    "check_head_name",
    "check_kind",
    "check_labels",
    "fit_temperature",
    "head_from_record",
    "head_to_record",
    "kind_of",
    "tune_binary_threshold",
    "tune_thresholds",
]

__getattr__ = lazy_names(
    __name__,
    {
        "LinearHead": ".linear",
        "head_from_record": ".linear",
        "head_to_record": ".linear",
        "MLPHead": ".mlp",
        "MLPTraining": ".mlp",
        "fit_temperature": ".calibration",
        "tune_binary_threshold": ".calibration",
        "tune_thresholds": ".calibration",
    },
)
