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
dynamic quantisation (per channel); the heads stay float32. Unless
``recheck=False``, a float-arithmetic twin is kept beside the int8 graph (its
weights stored as int8, one scale per output column, turned back into float32
inside the graph: about the int8 graph's size), with a margin per head measured
on calibration texts (the heads' kept training texts): a text some head answers
within its margin of changing is answered again by the twin
(:mod:`manyheads.bundle.recheck`), so int8 keeps the float labels at most of
int8's speed.

For a composite trunk (``minilm+tfidf``) the graph holds the transformer part
only and gives its embedding; the other parts run beside it in numpy and the
heads' fused matrix is applied to the joined vector.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from .._io import atomic_write_bytes, describe_os_error, staged_dir
from ..bundle import Bundle, check_writable
from ..bundle.graph import HEADS, compose_heads, const, graph_file_name, serialize
from ..bundle.recheck import calibrate_margins
from ..errors import BundleError, ConfigError, require
from ..trunks import TransformerTrunk
from ..trunks.base import file_sha256
from ..trunks.onnxrt import EMBEDDING, GraphSpec, OnnxTrunk

__all__ = ["compose_heads", "export_bundle", "graph_file_name"]

OPSET = 17
WINDOW_EMBEDDING = "window_embedding"
POOL = "mh.pool/"  # node / initializer prefix of the window averaging
# int8 recheck: the quantile of each head's int8 shifts taken as its margin, and the
# most calibration texts it is measured on (measured in bench/RESULTS.md)
RECHECK_QUANTILE = 0.7
CALIBRATION_TEXTS = 256


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


# a weight matrix with fewer entries stays float32 in the twin: a small share of a real
# encoder's size (MiniLM's smallest matrices hold 147,456), not worth moving answers for
SMALL_WEIGHTS = 65_536


def _weights_int8(model: Any, exclude: Sequence[str]) -> None:
    """Make ``model`` (an ONNX model, changed in place) the int8 graph's twin for
    rechecks, stored at about the int8 graph's size: every large weight matrix of a
    matrix product (and the embedding table of a lookup) is kept as int8 with one
    symmetric scale per output column (per row of a table) and turned back into float32
    inside the graph (``DequantizeLinear``); the arithmetic stays float32. Dynamic int8
    moves answers mostly by quantising the activations, each text's own; the weights'
    rounding alone moves them far less (measured in bench/RESULTS.md). The nodes named
    in ``exclude`` (window averaging, heads) keep their float32 weights."""
    from onnx import helper, numpy_helper

    graph = model.graph
    skip = set(exclude)
    users: dict[str, list[tuple[str, int, str]]] = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            users.setdefault(name, []).append((node.op_type, slot, node.name))
    dequantise = []
    for init in list(graph.initializer):
        seen = users.get(init.name, [])
        lookup = bool(seen) and all(op == "Gather" and slot == 0 for op, slot, _ in seen)
        product = bool(seen) and all(op == "MatMul" and slot == 1 for op, slot, _ in seen)
        if not (lookup or product) or any(name in skip for _, _, name in seen):
            continue
        W = numpy_helper.to_array(init)
        if W.dtype != np.float32 or W.ndim != 2 or W.size < SMALL_WEIGHTS:
            continue
        axis = 0 if lookup else 1  # a table's rows, a product's output columns
        peak = np.abs(W).max(axis=1 - axis)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        shaped = scale[:, None] if lookup else scale[None, :]
        q = np.clip(np.rint(W / shaped), -127, 127).astype(np.int8)
        graph.initializer.remove(init)
        graph.initializer.extend(
            [
                numpy_helper.from_array(q, init.name + "/int8"),
                numpy_helper.from_array(scale, init.name + "/scale"),
                numpy_helper.from_array(np.zeros_like(scale, np.int8), init.name + "/zero"),
            ]
        )
        dequantise.append(
            helper.make_node(
                "DequantizeLinear",
                [init.name + "/int8", init.name + "/scale", init.name + "/zero"],
                [init.name],
                axis=axis,
                name=init.name + "/dequantize",
            )
        )
    for node in reversed(dequantise):
        graph.node.insert(0, node)


# -- the whole bundle ------------------------------------------------------------


def export_bundle(
    bundle: Bundle,
    out: str | os.PathLike[str],
    *,
    int8: bool = False,
    recheck: bool = True,
    calibration: Sequence[str] | None = None,
    recheck_quantile: float = RECHECK_QUANTILE,
    opset: int = OPSET,
) -> Path:
    """Export ``bundle`` to the folder ``out`` (new or empty): an ONNX bundle.

    The folder holds ``bundle.json`` and ``heads.safetensors`` as every bundle
    does, the graph (``model-SHA.onnx``) and ``tokenizer.json``;
    ``Bundle.load(out)`` runs it with onnxruntime, without torch. The folder
    appears complete or not at all (built beside it, then renamed).

    ``int8``: quantise the encoder. With ``recheck`` (default) the float32 graph
    is kept too and unsure answers are rechecked with it; each head's margin is
    the ``recheck_quantile`` of its int8 shifts on ``calibration`` texts (default:
    up to 256 of the heads' kept training texts).
    """
    require("onnx", "onnx")
    out = Path(out)
    check_writable(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"cannot export to {out}: it exists and is not an empty folder")
    if not bundle.heads:
        raise BundleError("the bundle has no heads yet; train one before exporting")
    texts = _calibration_texts(bundle, int8, recheck, calibration, recheck_quantile)
    trunk = bundle.trunk
    parts = list(trunk.parts)
    neural = [i for i, p in enumerate(parts) if p.tunable]
    if any(p.exported for p in parts):
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
            _export_into(
                work,
                bundle,
                parts,
                neural[0],
                int8=int8,
                opset=opset,
                calibration=texts,
                quantile=recheck_quantile,
            )
    except OSError as exc:
        raise BundleError(f"cannot export to {out}: {describe_os_error(exc)}") from None
    return out


def _calibration_texts(
    bundle: Bundle,
    int8: bool,
    recheck: bool,
    calibration: Sequence[str] | None,
    quantile: float,
) -> list[str] | None:
    """The texts an int8 recheck is calibrated on (None: no recheck), or a one-line
    refusal of options that do not go together."""
    if not int8 or not recheck:
        if calibration is not None:
            raise ConfigError("calibration texts are for an int8 export with recheck")
        return None
    if isinstance(quantile, bool) or not isinstance(quantile, int | float):
        raise ConfigError(f"recheck_quantile must be a number, got {quantile!r}")
    if not 0 < quantile < 1:
        raise ConfigError(f"recheck_quantile must be between 0 and 1, got {quantile}")
    if calibration is None:
        kept: dict[str, None] = {}
        for name in bundle.heads:
            data = bundle.training_data(name)
            kept.update(dict.fromkeys(data[0] if data else []))
        texts = list(kept)
        where = "the heads' kept training texts"
    else:
        if isinstance(calibration, str) or not all(isinstance(t, str) for t in calibration):
            raise ConfigError("calibration must be a list of texts")
        texts, where = list(calibration), "the calibration texts"
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ConfigError(
            f"an int8 export calibrates its recheck on {where}, and there are none; "
            "pass calibration texts, or recheck=False (--no-recheck) for int8 alone"
        )
    if len(texts) > CALIBRATION_TEXTS:
        picked = np.random.default_rng(0).choice(len(texts), CALIBRATION_TEXTS, replace=False)
        texts = [texts[i] for i in sorted(picked)]
    return texts


def _export_into(
    work: Path,
    bundle: Bundle,
    parts: list[Any],
    neural: int,
    *,
    int8: bool,
    opset: int,
    calibration: list[str] | None = None,
    quantile: float = RECHECK_QUANTILE,
) -> None:
    """Write the exported bundle into the staged folder ``work``."""
    onnx = require("onnx", "onnx")
    source = cast(TransformerTrunk, parts[neural])  # the tunable part, checked by the caller
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
    tail = [n.name for n in model.graph.node if n.name.startswith((POOL, HEADS))]
    if int8:
        _quantize(full, graph, tail)
    else:
        full.rename(graph)
    source.save_tokenizer(work / "tokenizer.json")

    def named(path: Path) -> tuple[str, str]:
        sha = file_sha256(path)
        path.rename(work / graph_file_name(sha))
        return graph_file_name(sha), sha

    def on(part: OnnxTrunk) -> Bundle:
        new_parts = list(parts)
        new_parts[neural] = part
        return bundle.with_trunk(trunk.with_parts(new_parts))

    file, sha = named(graph)
    described = GraphSpec(
        name=source.name,
        fingerprint=source.fingerprint,
        dim=source.dim,
        max_length=source.max_length,
        overflow=source.overflow,
        source=source.spec(),
        file=file,
        sha256=sha,
        quantization="int8" if int8 else None,
    )
    exported = OnnxTrunk(work, described)
    if int8 and calibration is not None:
        _weights_int8(model, tail)
        atomic_write_bytes(full, serialize(model))
        twin_file, twin_sha = named(full)
        twin = OnnxTrunk(
            work, described.replace(file=twin_file, sha256=twin_sha, quantization=None)
        )
        fused = bundle.fused_heads
        assert fused is not None  # the caller checked the bundle has heads
        quick = on(exported).predict_proba(calibration)
        margins = calibrate_margins(fused, quick, on(twin).predict_proba(calibration), quantile)
        digests = {n: s.digest for n, s in fused.specs.items()}
        recheck = {
            "file": twin_file,
            "sha256": twin_sha,
            "quantile": quantile,
            "heads": {n: {"digest": digests[n], "margin": m} for n, m in margins.items()},
        }
        exported = OnnxTrunk(work, described.replace(recheck=recheck))
    full.unlink(missing_ok=True)
    on(exported).save(work)
    (work / ".lock").unlink(missing_ok=True)
