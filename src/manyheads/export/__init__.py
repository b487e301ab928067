"""Writing a bundle as one ONNX graph: the encoder (torch), its pooling and
normalisation, every head; int8. Loading and predicting never import this package:
the onnxruntime trunk that runs a graph is :mod:`manyheads.trunks.onnxrt`, and
rewriting an exported bundle's heads on save is :mod:`manyheads.bundle.graph`."""

from .onnx import OPSET, export_bundle

__all__ = ["OPSET", "export_bundle"]
