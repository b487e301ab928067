"""The torch side of heads: a task's loss by its kind, the one every trained layer on
top of features uses (MLP heads, the byte trunk's training heads, fine-tuning's task
layers). Imported only to train; needs torch."""

from __future__ import annotations

from typing import Any

from ..errors import require
from .kinds import kind_of

__all__ = ["distil_loss", "task_loss"]


def task_loss(
    kind: str,
    logits: Any,
    target: Any,
    *,
    class_weight: Any = None,
    pos_weight: Any = None,
) -> Any:
    """The mean loss of ``logits`` against ``target`` for a head of ``kind``.

    multiclass: softmax cross-entropy (``target``: class indices; ``class_weight``
    per class); binary: sigmoid cross-entropy of one logit (``target``: 0/1 per row, as
    floats; ``class_weight``: the weight of class 0 and 1, a weighted mean);
    multilabel: sigmoid cross-entropy per label (``target``: 0/1 matrix;
    ``pos_weight``: per label, the weight of its positives).
    """
    functional = require("torch", "transformers").nn.functional
    return kind_of(kind).loss(functional, logits, target, class_weight, pos_weight)


def distil_loss(kind: str, logits: Any, target: Any, temperature: float = 1.0) -> Any:
    """The mean loss of ``logits`` against a teacher's probabilities ``target``
    (softened by the same ``temperature``): softmax cross-entropy against each row's
    distribution (multiclass), sigmoid cross-entropy against each probability otherwise;
    times ``temperature ** 2`` so its gradients keep their size as the temperature grows."""
    functional = require("torch", "transformers").nn.functional
    z = logits / temperature
    return kind_of(kind).distil_loss(functional, z, target) * temperature**2
