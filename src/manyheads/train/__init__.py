"""Training: a head on cached embeddings (:func:`fit.fit_head`, behind
``Bundle.fit_head``), a byte trunk (:func:`byte.train_byte_trunk`), a transformer
trunk fine-tuned on several tasks at once (:mod:`lpft`) and a bundle's trunk
fine-tuned with every head refitted (:func:`finetune.finetune_bundle`, behind
``Bundle.finetune``). Every trained layer reads labels the one way
(:mod:`manyheads.heads.targets`) and takes the same per-kind loss
(:mod:`manyheads.heads.nn`). Loading and predicting never import this package."""

from .byte import ByteTrainSummary, train_byte_trunk
from .finetune import FinetuneSummary, finetune_bundle
from .fit import HeadSummary, fit_head

__all__ = [
    "ByteTrainSummary",
    "FinetuneSummary",
    "HeadSummary",
    "finetune_bundle",
    "fit_head",
    "train_byte_trunk",
]
