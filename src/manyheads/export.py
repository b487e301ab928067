"""Export a bundle to one ONNX graph: trunk, pooling, normalisation and every head.

The graph takes ``input_ids`` and ``attention_mask`` (windows x tokens) and
``window_weights`` (texts x windows) and gives ``embedding`` (texts x dim, the
L2-normalised mean of each text's normalised windows) and, for every head,
``probs/NAME`` (texts x outputs): one fused matrix product for all heads'
first layers, then per head its output layer and activation (softmax,
sigmoid; binary heads give ``[1 - p, p]``).

How it is built: torch exports the encoder with its pooling and
normalisation once; everything after the encoder is written with
``onnx.helper`` from the heads' stored weights. Adding, replacing or removing
a head in an exported bundle therefore rewrites only that tail of the graph
(no torch, no re-export of the encoder) when the bundle is saved; until then
the bundle applies heads the graph lacks to the graph's embedding in numpy.

With ``int8=True`` the encoder's weights are quantised with onnxruntime's
dynamic quantisation (per channel); the heads stay float32.

For a composite trunk (``minilm+tfidf``) the graph holds the transformer part
only and gives its embedding; the other parts run beside it in numpy and the
heads' fused matrix is applied to the joined vector.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._io import atomic_write_bytes, describe_os_error, staged_dir
from .errors import BundleError, ConfigError, require
from .heads.fused import FusedHeads
from .trunks.onnxrt import EMBEDDING, HEAD_PREFIX, META_HEADS, OnnxTrunk, file_sha256

if TYPE_CHECKING:
    from .bundle import Bundle
    from .trunks.transformer import TransformerTrunk

__all__ = ["compose_heads", "export_bundle", "graph_file_name"]

OPSET = 17
WINDOW_EMBEDDING = "window_embedding"
POOL = "mh.pool/"  # node / initializer prefix of the window averaging
HEADS = "mh.heads/"  # node / initializer prefix of the heads (rewritten when heads change)
_MAX_PROTO = 1_800_000_000  # protobuf's 2 GB limit, with room


def graph_file_name(sha256: str) -> str:
    """Graph files are named by their content, so a new graph never overwrites a used one."""
    return f"model-{sha256[:12]}.onnx"


# -- encoder (torch) -----------------------------------------------------------


def _export_encoder(trunk: TransformerTrunk, path: Path, opset: int) -> None:
    """Encoder + pooling + per-window L2 normalisation as an ONNX file (needs torch)."""
    torch = require("torch", "transformers")
    transformers = require("transformers", "transformers")
    from ._progress import transformers_bars

    with transformers_bars(False):
        try:
            model = transformers.AutoModel.from_pretrained(
                str(trunk._model_dir),
                local_files_only=True,
                use_safetensors=True,
                attn_implementation="eager",
            )
        except (TypeError, ValueError):  # a model without the eager attention option
            model = transformers.AutoModel.from_pretrained(
                str(trunk._model_dir), local_files_only=True, use_safetensors=True
            )
    model.eval()
    pooling = trunk.pooling

    class Pooled(torch.nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask)
            hidden = hidden.last_hidden_state
            if pooling == "cls":
                pooled = hidden[:, 0]
            else:
                m = attention_mask.unsqueeze(-1).to(hidden.dtype)
                if pooling == "max":
                    pooled = hidden.masked_fill(m == 0, float("-inf")).max(dim=1).values
                else:
                    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
            return pooled / pooled.norm(dim=1, keepdim=True).clamp(min=1e-12)

    ids = torch.ones((2, 8), dtype=torch.long)
    mask = torch.ones((2, 8), dtype=torch.long)
    axes = {0: "windows", 1: "tokens"}
    import warnings

    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(),
            (ids, mask),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=[WINDOW_EMBEDDING],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                WINDOW_EMBEDDING: {0: "windows"},
            },
            opset_version=opset,
            dynamo=False,
        )


# -- the tail: window averaging, normalisation, heads (onnx.helper) ----------------


def _const(onnx: Any, name: str, array: np.ndarray) -> Any:
    return onnx.numpy_helper.from_array(np.ascontiguousarray(array), name=name)


def _add_pooling(onnx: Any, graph: Any, dim: int) -> None:
    """``embedding = normalise(window_weights @ window_embedding)``."""
    h = onnx.helper
    graph.input.append(
        h.make_tensor_value_info("window_weights", onnx.TensorProto.FLOAT, ["texts", "windows"])
    )
    graph.initializer.extend(
        [
            _const(onnx, POOL + "axes", np.array([1], dtype=np.int64)),
            _const(onnx, POOL + "eps", np.array(1e-12, dtype=np.float32)),
        ]
    )
    graph.node.extend(
        [
            h.make_node(
                "MatMul", ["window_weights", WINDOW_EMBEDDING], [POOL + "sum"], name=POOL + "sum"
            ),
            h.make_node("Mul", [POOL + "sum", POOL + "sum"], [POOL + "sq"], name=POOL + "sq"),
            h.make_node(
                "ReduceSum",
                [POOL + "sq", POOL + "axes"],
                [POOL + "ss"],
                name=POOL + "ss",
                keepdims=1,
            ),
            h.make_node("Sqrt", [POOL + "ss"], [POOL + "norm"], name=POOL + "norm"),
            h.make_node("Max", [POOL + "norm", POOL + "eps"], [POOL + "clip"], name=POOL + "clip"),
            h.make_node("Div", [POOL + "sum", POOL + "clip"], [EMBEDDING], name=POOL + "div"),
        ]
    )
    graph.output.append(h.make_tensor_value_info(EMBEDDING, onnx.TensorProto.FLOAT, ["texts", dim]))


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
        nodes, inits = [], [_const(onnx, HEADS + "W", fused.W), _const(onnx, HEADS + "b", fused.b)]
        nodes.append(
            h.make_node("MatMul", [EMBEDDING, HEADS + "W"], [HEADS + "XW"], name=HEADS + "XW")
        )
        nodes.append(
            h.make_node("Add", [HEADS + "XW", HEADS + "b"], [HEADS + "Z"], name=HEADS + "Z")
        )
        inits.append(_const(onnx, HEADS + "axis1", np.array([1], dtype=np.int64)))
        inits.append(_const(onnx, HEADS + "one", np.array(1.0, dtype=np.float32)))
        for name in fused.names:
            spec, cols, p = fused.specs[name], fused.slices[name], f"{HEADS}{name}/"
            inits.append(_const(onnx, p + "start", np.array([cols.start], dtype=np.int64)))
            inits.append(_const(onnx, p + "stop", np.array([cols.stop], dtype=np.int64)))
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
                inits += [_const(onnx, p + "W2", spec.W2), _const(onnx, p + "b2", spec.b2)]
                nodes += [
                    h.make_node("Relu", [z], [p + "h"], name=p + "relu"),
                    h.make_node("MatMul", [p + "h", p + "W2"], [p + "hw"], name=p + "out"),
                    h.make_node("Add", [p + "hw", p + "b2"], [p + "logits"], name=p + "bias"),
                ]
                z = p + "logits"
            out = HEAD_PREFIX + name
            if spec.kind == "multiclass":
                nodes.append(h.make_node("Softmax", [z], [out], name=p + "softmax", axis=1))
            elif spec.kind == "multilabel":
                nodes.append(h.make_node("Sigmoid", [z], [out], name=p + "sigmoid"))
            else:
                nodes += [
                    h.make_node("Sigmoid", [z], [p + "p"], name=p + "sigmoid"),
                    h.make_node("Sub", [HEADS + "one", p + "p"], [p + "q"], name=p + "q"),
                    h.make_node("Concat", [p + "q", p + "p"], [out], name=p + "concat", axis=1),
                ]
            k = 2 if spec.kind == "binary" else spec.n_outputs
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


def _serialize(model: Any) -> bytes:
    """The graph as the bytes of one ONNX file (refused above protobuf's 2 GB limit)."""
    if model.ByteSize() > _MAX_PROTO:
        raise BundleError(
            "the exported graph is larger than 2 GB, which one ONNX file cannot hold; "
            "manyheads exports models below that size"
        )
    return bytes(model.SerializeToString())


def _quantize(source: Path, target: Path, exclude: list[str]) -> None:
    require("onnxruntime", "onnx")
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # its "consider pre-processing" advice
    try:
        quantize_dynamic(
            str(source),
            str(target),
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=exclude,
            extra_options={"DefaultTensorType": 1},  # float, where shape inference stops
        )
    finally:
        logging.getLogger().setLevel(quiet)


def rewrite_heads(folder: Path, trunk: OnnxTrunk, fused: FusedHeads | None) -> str:
    """Write ``trunk``'s graph with ``fused`` as its heads into ``folder``; returns the new
    graph's SHA-256. Its file, ``graph_file_name(sha)``, is named by its content; the old
    file is left for the caller to drop."""
    onnx = require("onnx", "onnx")
    model = onnx.load(str(trunk.folder / trunk.file))
    compose_heads(model, fused)
    blob = _serialize(model)
    sha = hashlib.sha256(blob).hexdigest()
    target = folder / graph_file_name(sha)
    if not target.exists():
        atomic_write_bytes(target, blob)
    return sha


# -- the whole bundle ------------------------------------------------------------


def export_bundle(
    bundle: Bundle, out: str | os.PathLike[str], *, int8: bool = False, opset: int = OPSET
) -> Path:
    """Export ``bundle`` to the folder ``out`` (new or empty): an ONNX bundle.

    The folder holds ``bundle.json`` and ``heads.safetensors`` as every bundle
    does, the graph (``model-SHA.onnx``) and ``tokenizer.json``;
    ``Bundle.load(out)`` runs it with onnxruntime, without torch. The folder
    appears complete or not at all (built beside it, then renamed).
    """
    from .trunks import CompositeTrunk
    from .trunks.transformer import TransformerTrunk

    require("onnx", "onnx")
    from .bundle import check_writable

    out = Path(out)
    check_writable(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"cannot export to {out}: it exists and is not an empty folder")
    if not bundle.heads:
        raise BundleError("the bundle has no heads yet; train one before exporting")
    trunk = bundle.trunk
    parts = list(trunk.parts) if isinstance(trunk, CompositeTrunk) else [trunk]
    neural = [i for i, p in enumerate(parts) if isinstance(p, TransformerTrunk)]
    if any(isinstance(p, OnnxTrunk) for p in parts):
        raise ConfigError(
            "this bundle is already exported to ONNX; export its source bundle "
            "(the one trained with the transformer trunk) again"
        )
    if len(neural) != 1:
        raise ConfigError(
            f"export needs a trunk with one transformer part; {bundle.trunk_name!r} has "
            f"{len(neural)} (a hashing / tfidf trunk runs without torch already)"
        )
    try:
        with staged_dir(out) as work:
            _export_into(work, bundle, parts, neural[0], int8=int8, opset=opset)
    except OSError as exc:
        raise BundleError(f"cannot export to {out}: {describe_os_error(exc)}") from None
    return out


def _export_into(
    work: Path, bundle: Bundle, parts: list[Any], neural: int, *, int8: bool, opset: int
) -> None:
    """Write the exported bundle into the staged folder ``work``."""
    from .bundle import Bundle
    from .trunks import CompositeTrunk

    onnx = require("onnx", "onnx")
    source: TransformerTrunk = parts[neural]  # checked by the caller
    composite = len(parts) > 1
    trunk = bundle.trunk
    encoder = work / "encoder.onnx"
    _export_encoder(source, encoder, opset)
    model = onnx.load(str(encoder))
    _add_pooling(onnx, model.graph, source.dim)
    compose_heads(model, None if composite else bundle._state.fused)
    full = work / "full.onnx"
    atomic_write_bytes(full, _serialize(model))
    encoder.unlink()
    graph = work / "graph.onnx"
    if int8:
        tail = [n.name for n in model.graph.node if n.name.startswith((POOL, HEADS))]
        _quantize(full, graph, tail)
        full.unlink()
    else:
        full.rename(graph)
    sha = file_sha256(graph)
    graph.rename(work / graph_file_name(sha))
    source._tokenizer.save(str(work / "tokenizer.json"))
    exported = OnnxTrunk(
        work,
        name=source.name,
        file=graph_file_name(sha),
        fingerprint=source.fingerprint,
        dim=source.dim,
        max_length=source.max_length,
        sha256=sha,
        quantization="int8" if int8 else None,
        source=source.spec(),
    )
    new_parts = list(parts)
    new_parts[neural] = exported
    new_trunk: Any = (
        CompositeTrunk(new_parts, trunk.weights)  # type: ignore[attr-defined]
        if composite
        else exported
    )
    copy = Bundle(new_trunk, cache=bundle._cache_arg)
    copy._trunk_state = bundle._current_trunk_state()
    copy._state = bundle._state
    copy._data = dict(bundle._data)
    copy.path = bundle.path  # kept training data is read from the source folder
    copy.save(work)
    (work / ".lock").unlink(missing_ok=True)
