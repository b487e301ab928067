"""A head of any type to its stored record and back (the estimators are built, with
scikit-learn, only when asked for)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["any_head_from_record", "any_head_to_record"]


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
