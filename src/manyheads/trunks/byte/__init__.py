"""A tokenizer-free byte trunk, trained multi-task.

Raw UTF-8 bytes in; no tokenizer, no pretrained weights:

    bytes -> byte embedding -> a strided stem convolution -> depthwise-separable
    convolution blocks (dilations 1, 2, 4, 8: receptive field ~490 bytes) ->
    optional light bidirectional self-attention (``heads``) -> statistical
    pooling (mean ‖ max ‖ std) ‖ a bag of hashed byte 1- to 4-grams, each row
    weighed by log(1 + its count), unit length (``bag``, ``bag_norm``; its
    table int8) -> a linear projection to an
    embedding with nested (Matryoshka) dimensions

so the first 32 / 64 / 128 / 256 numbers of a vector are each an embedding on
their own (a small *tier* is a slice of the big one). Long inputs are read
deliberately: a text longer than ``max_bytes`` is read as its first and last
``max_bytes / 2`` bytes with a separator between them (the head of a file says
what it is, the tail often too), never silently cut at the end.

The parts: ``config`` (the shape, bytes as ids; numpy), ``model`` (the torch
module), ``graph`` (its ONNX graph, written with torch, weights read back with
onnx), ``runtime`` (:class:`ByteTrunk`, encoding with onnxruntime). Training
(:func:`manyheads.train.byte.train_byte_trunk`) lives with the other training
code.

A saved byte trunk carries its ONNX graph (``model-SHA.onnx`` in the bundle
folder, written by ``Bundle.save``), and encodes with onnxruntime when it is
installed: no torch needed to predict. A trained trunk computes its stem as
table lookups (byte ``v`` at kernel offset ``t`` adds a precomputed row), the
same numbers as the strided convolution it trains as; its blocks run channels
last; its bag is scaled after the table product. ``ByteTrunk.drop_graph``
makes the next save export the graph anew (a bundle keeps the graph it was
saved with).
"""

from .config import (
    BAG_INITS,
    BAG_NORMS,
    PAD,
    SEP,
    SPREADS,
    ByteConfig,
    byte_ids,
    expected_shapes,
    quantize_rows,
)
from .runtime import ByteTrunk

__all__ = [
    "BAG_INITS",
    "BAG_NORMS",
    "PAD",
    "SEP",
    "SPREADS",
    "ByteConfig",
    "ByteTrunk",
    "byte_ids",
    "expected_shapes",
    "quantize_rows",
]
