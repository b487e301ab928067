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

import os
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_bytes, describe_os_error, staged_dir
from ..bundle import Bundle, check_writable
from ..bundle.graph import HEADS, compose_heads, const, graph_file_name, serialize
from ..errors import BundleError, ConfigError, require
from ..trunks import CompositeTrunk, TransformerTrunk
from ..trunks.base import file_sha256
from ..trunks.onnxrt import EMBEDDING, OnnxTrunk

__all__ = ["compose_heads", "export_bundle", "graph_file_name"]

OPSET = 17
WINDOW_EMBEDDING = "window_embedding"
POOL = "mh.pool/"  # node / initializer prefix of the window averaging


# -- encoder (torch) -----------------------------------------------------------


def _export_encoder(trunk: TransformerTrunk, path: Path, opset: int) -> None:
    """Encoder + pooling + per-window L2 normalisation as an ONNX file (needs torch)."""
    torch = require("torch", "transformers")
    transformers = require("transformers", "transformers")
    from .._progress import transformers_bars

    with transformers_bars(False):
        try:
            model = transformers.AutoModel.from_pretrained(
                str(trunk.model_dir),
                local_files_only=True,
                use_safetensors=True,
                attn_implementation="eager",
            )
        except (TypeError, ValueError):  # a model without the eager attention option
            model = transformers.AutoModel.from_pretrained(
                str(trunk.model_dir), local_files_only=True, use_safetensors=True
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


def _add_pooling(onnx: Any, graph: Any, dim: int) -> None:
    """``embedding = normalise(window_weights @ window_embedding)``."""
    h = onnx.helper
    graph.input.append(
        h.make_tensor_value_info("window_weights", onnx.TensorProto.FLOAT, ["texts", "windows"])
    )
    graph.initializer.extend(
        [
            const(onnx, POOL + "axes", np.array([1], dtype=np.int64)),
            const(onnx, POOL + "eps", np.array(1e-12, dtype=np.float32)),
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
    require("onnx", "onnx")
    out = Path(out)
    check_writable(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"cannot export to {out}: it exists and is not an empty folder")
    if not bundle.heads:
        raise BundleError("the bundle has no heads yet; train one before exporting")
    trunk = bundle.trunk
    parts = list(trunk.parts)
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
    onnx = require("onnx", "onnx")
    source: TransformerTrunk = parts[neural]  # checked by the caller
    composite = len(parts) > 1
    trunk = bundle.trunk
    encoder = work / "encoder.onnx"
    _export_encoder(source, encoder, opset)
    model = onnx.load(str(encoder))
    _add_pooling(onnx, model.graph, source.dim)
    compose_heads(model, None if composite else bundle.fused_heads)
    full = work / "full.onnx"
    atomic_write_bytes(full, serialize(model))
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
    source.save_tokenizer(work / "tokenizer.json")
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
        CompositeTrunk(new_parts, trunk.weights) if isinstance(trunk, CompositeTrunk) else exported
    )
    bundle.with_trunk(new_trunk).save(work)
    (work / ".lock").unlink(missing_ok=True)
