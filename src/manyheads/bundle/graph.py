"""An exported bundle's graph holds its heads (after the encoder, pooling and
normalisation): one fused matrix product, then each head's output layer and
activation. Changing the heads of an exported bundle rewrites only that tail of
the graph when the bundle is saved (onnx, no torch); the writing of the encoder
itself is :mod:`manyheads.export`'s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .._io import GRAPH_FILE, hashed_name, write_hashed
from ..errors import BundleError, require
from ..heads import FusedHeads
from ..trunks.onnxrt import EMBEDDING, HEAD_PREFIX, META_HEADS, OnnxTrunk

__all__ = ["HEADS", "compose_heads", "const", "graph_file_name", "rewrite_heads", "serialize"]

HEADS = "mh.heads/"  # node / initializer prefix of the heads (rewritten when heads change)
_MAX_PROTO = 1_800_000_000  # protobuf's 2 GB limit, with room


def graph_file_name(sha256: str) -> str:
    """Graph files are named by their content, so a new graph never overwrites a used one."""
    return hashed_name(GRAPH_FILE, sha256)


def const(onnx: Any, name: str, array: np.ndarray) -> Any:
    return onnx.numpy_helper.from_array(np.ascontiguousarray(array), name=name)


def compose_heads(model: Any, fused: FusedHeads | None) -> Any:
    """Replace the heads at the end of ``model`` (an ``onnx.ModelProto``) with ``fused``.

    Nodes, initializers and outputs of the previous heads (prefix ``mh.heads/``,
    outputs ``probs/...``) are removed first; the encoder is left untouched.
    ``fused=None`` leaves a graph that gives the embedding only.
    """
    onnx = require("onnx", "onnx")
    h = onnx.helper
    graph = model.graph
    keep_nodes = [n for n in graph.node if not n.name.startswith(HEADS)]
    keep_init = [i for i in graph.initializer if not i.name.startswith(HEADS)]
    keep_out = [o for o in graph.output if not o.name.startswith(HEAD_PREFIX)]
    for field, kept in ((graph.node, keep_nodes), (graph.initializer, keep_init)):
        del field[:]
        field.extend(kept)
    del graph.output[:]
    graph.output.extend(keep_out)
    digests: dict[str, str] = {}
    if fused is not None:
        fused = fused.dense_only()  # a tree head searches in numpy, on the graph's vector
    if fused is not None:
        nodes, inits = [], [const(onnx, HEADS + "W", fused.W), const(onnx, HEADS + "b", fused.b)]
        nodes.append(
            h.make_node("MatMul", [EMBEDDING, HEADS + "W"], [HEADS + "XW"], name=HEADS + "XW")
        )
        nodes.append(
            h.make_node("Add", [HEADS + "XW", HEADS + "b"], [HEADS + "Z"], name=HEADS + "Z")
        )
        inits.append(const(onnx, HEADS + "axis1", np.array([1], dtype=np.int64)))
        inits.append(const(onnx, HEADS + "one", np.array(1.0, dtype=np.float32)))
        for name in fused.names:
            spec, cols, p = fused.specs[name], fused.slices[name], f"{HEADS}{name}/"
            inits.append(const(onnx, p + "start", np.array([cols.start], dtype=np.int64)))
            inits.append(const(onnx, p + "stop", np.array([cols.stop], dtype=np.int64)))
            nodes.append(
                h.make_node(
                    "Slice",
                    [HEADS + "Z", p + "start", p + "stop", HEADS + "axis1"],
                    [p + "z"],
                    name=p + "slice",
                )
            )
            z = p + "z"
            if spec.W2 is not None:  # MLP head: ReLU, output layer
                assert spec.b2 is not None
                inits += [const(onnx, p + "W2", spec.W2), const(onnx, p + "b2", spec.b2)]
                nodes += [
                    h.make_node("Relu", [z], [p + "h"], name=p + "relu"),
                    h.make_node("MatMul", [p + "h", p + "W2"], [p + "hw"], name=p + "out"),
                    h.make_node("Add", [p + "hw", p + "b2"], [p + "logits"], name=p + "bias"),
                ]
                z = p + "logits"
            out = HEAD_PREFIX + name
            if spec.kind.exclusive:
                nodes.append(h.make_node("Softmax", [z], [out], name=p + "softmax", axis=1))
            elif not spec.kind.single_logit:  # a set (hierarchical: decided top-down later)
                nodes.append(h.make_node("Sigmoid", [z], [out], name=p + "sigmoid"))
            else:  # one logit: [1 - p, p]
                nodes += [
                    h.make_node("Sigmoid", [z], [p + "p"], name=p + "sigmoid"),
                    h.make_node("Sub", [HEADS + "one", p + "p"], [p + "q"], name=p + "q"),
                    h.make_node("Concat", [p + "q", p + "p"], [out], name=p + "concat", axis=1),
                ]
            k = len(spec.labels)  # a probability per label
            graph.output.append(h.make_tensor_value_info(out, onnx.TensorProto.FLOAT, ["texts", k]))
            digests[name] = spec.digest
        graph.node.extend(nodes)
        graph.initializer.extend(inits)
    meta = {p.key: p.value for p in model.metadata_props}
    meta[META_HEADS] = json.dumps(digests, sort_keys=True)
    del model.metadata_props[:]
    for key, value in sorted(meta.items()):
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    return model


def serialize(model: Any) -> bytes:
    """The graph as the bytes of one ONNX file (refused above protobuf's 2 GB limit)."""
    if model.ByteSize() > _MAX_PROTO:
        raise BundleError(
            "the exported graph is larger than 2 GB, which one ONNX file cannot hold; "
            "manyheads exports models below that size"
        )
    return bytes(model.SerializeToString())


def rewrite_heads(folder: Path, trunk: OnnxTrunk, fused: FusedHeads | None) -> str:
    """Write ``trunk``'s graph with ``fused`` as its heads into ``folder``; returns the new
    graph's SHA-256. Its file, ``graph_file_name(sha)``, is named by its content; the old
    file is left for the caller to drop."""
    onnx = require("onnx", "onnx")
    model = onnx.load(str(trunk.folder / trunk.file))
    compose_heads(model, fused)
    return write_hashed(folder, serialize(model), GRAPH_FILE)[1]
