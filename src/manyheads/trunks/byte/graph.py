"""A byte trunk's ONNX graph: written from its torch module (torch), and its weights
read back from the graph's initializers (onnx)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ManyheadsError, require
from ..onnxrt import read_graph
from .config import ByteConfig, byte_ids


def graph_initializers(
    path: Path, names: set[str], sha256: str | None = None
) -> dict[str, np.ndarray]:
    """The initializers of the ONNX graph file ``path`` named in ``names`` (the file
    checked against ``sha256`` first, when given)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise ManyheadsError(
            f"the byte trunk keeps its weights in its ONNX graph ({path.name}); reading them "
            "needs the onnx package: pip install 'manyheads[onnx]'"
        ) from None
    blob = read_graph(path, sha256)
    try:
        model = onnx.load_model_from_string(blob)
    except Exception as exc:  # protobuf and onnx raise several kinds
        raise ManyheadsError(f"cannot read the byte trunk's graph {path}: {exc}") from exc
    # copies: to_array gives read-only views of the protobuf's bytes, which torch warns on
    return {
        i.name: np.array(numpy_helper.to_array(i))
        for i in model.graph.initializer
        if i.name in names
    }


def export_graph(module: Any, config: ByteConfig) -> bytes:
    """The ONNX graph of a byte trunk's torch ``module``: ids in, embedding out."""
    import io
    import warnings

    torch = require("torch", "transformers")
    buf = io.BytesIO()
    example = torch.from_numpy(byte_ids(["example text", "x"], config.max_bytes, config.stride)[0])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation notes
        torch.onnx.export(
            module,
            (example,),
            buf,
            input_names=["ids"],
            output_names=["embedding"],
            dynamic_axes={"ids": {0: "batch", 1: "length"}, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
            # folding would store the int8 bag table's float copy (4x the size);
            # onnxruntime folds it in memory when it loads the graph
            do_constant_folding=False,
        )
    return buf.getvalue()
