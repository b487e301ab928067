"""Heads: small classifiers on trunk embeddings, and their fusion into one matrix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from .calibration import fit_temperature, tune_binary_threshold, tune_thresholds
from .fused import FusedHeads
from .linear import KINDS, LinearHead, check_kind, head_from_record, head_to_record

if TYPE_CHECKING:
    from .mlp import MLPHead

AnyHead: TypeAlias = "LinearHead | MLPHead"

__all__ = [
    "KINDS",
    "AnyHead",
    "FusedHeads",
    "LinearHead",
    "any_head_from_record",
    "any_head_to_record",
    "check_kind",
    "fit_temperature",
    "head_from_record",
    "head_to_record",
    "tune_binary_threshold",
    "tune_thresholds",
]


def any_head_to_record(head: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Record and tensors of a linear or MLP head."""
    if isinstance(head, LinearHead):
        return head_to_record(head)
    from .mlp import MLPHead, mlp_head_to_record

    if isinstance(head, MLPHead):
        return mlp_head_to_record(head)
    raise TypeError(f"not a manyheads head: {type(head).__name__}")


def any_head_from_record(record: dict[str, Any], tensors: dict[str, np.ndarray]) -> Any:
    """Rebuild a head of any known type (``record['type']``: linear or mlp)."""
    if record.get("type", "linear") == "mlp":
        from .mlp import mlp_head_from_record

        return mlp_head_from_record(record, tensors)
    return head_from_record(record, tensors)
