"""Heads: small classifiers on trunk embeddings, and their fusion into one matrix.

The estimators (:class:`LinearHead`, :class:`MLPHead`) need scikit-learn and
are imported on first use; :class:`FusedHeads` and the stored head records
need numpy only, so a bundle can answer without importing scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from .fused import KINDS, FusedHeads

if TYPE_CHECKING:
    from .calibration import fit_temperature, tune_binary_threshold, tune_thresholds
    from .linear import LinearHead, check_kind, head_from_record, head_to_record
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

_LAZY = {
    "LinearHead": "linear",
    "check_kind": "linear",
    "head_from_record": "linear",
    "head_to_record": "linear",
    "MLPHead": "mlp",
    "fit_temperature": "calibration",
    "tune_binary_threshold": "calibration",
    "tune_thresholds": "calibration",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def any_head_to_record(head: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Record and tensors of a linear or MLP head."""
    from .linear import LinearHead, head_to_record

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
    from .linear import head_from_record

    return head_from_record(record, tensors)
