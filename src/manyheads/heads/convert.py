"""A head of any type to its stored record and back (the estimators are built, with
scikit-learn, only when asked for): each type of :mod:`~manyheads.heads.head_types`
says how."""

from __future__ import annotations

from typing import Any

import numpy as np

from .head_types import HEAD_TYPE_REGISTRY, head_type

__all__ = ["any_head_from_record", "any_head_to_record"]


def any_head_to_record(head: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Record and tensors of a head of any registered type."""
    for kind in HEAD_TYPE_REGISTRY.values():
        if isinstance(head, kind.estimator_class()):
            return kind.to_record(head)
    raise TypeError(f"not a manyheads head: {type(head).__name__}")


def any_head_from_record(record: dict[str, Any], tensors: dict[str, np.ndarray]) -> Any:
    """Rebuild a head of any registered type (``record['type']``, default linear)."""
    return head_type(record.get("type", "linear")).from_record(record, tensors)
