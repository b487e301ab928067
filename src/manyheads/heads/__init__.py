"""Heads: small classifiers on trunk embeddings, and their fusion into one matrix."""

from .calibration import fit_temperature, tune_binary_threshold, tune_thresholds
from .fused import FusedHeads
from .linear import KINDS, LinearHead, check_kind, head_from_record, head_to_record

__all__ = [
    "KINDS",
    "FusedHeads",
    "LinearHead",
    "check_kind",
    "fit_temperature",
    "head_from_record",
    "head_to_record",
    "tune_binary_threshold",
    "tune_thresholds",
]
