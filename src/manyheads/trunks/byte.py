"""A tokenizer-free byte trunk, trained multi-task (first part: model, training, encoding).

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

Training (:func:`train_byte_trunk`) fits the trunk jointly with one linear
head per task and per nested dimension (the Matryoshka loss), each task's
loss divided by its loss at chance (``log K`` for K classes, ``log 2`` per
label), so a 50-way task does not drown a binary one, nor an easy task a hard
one (``weighting="uncertainty"``: learned ``exp(-s) * loss + s`` instead).
With a bag, each task also has a head on the bag alone, and half the texts
(``path_dropout``) see no convolution features: the bag must answer by itself,
which keeps the trunk from leaning on what the convolutions memorise; with
``crop``, a share of the texts is read at every epoch as a random piece of
itself, so no text can be learnt by heart. The training heads are dropped
afterwards: heads are fitted on the frozen trunk
like on any other (``Bundle.fit_head``), from cached vectors.

Needs torch to train. A saved byte trunk also carries its ONNX graph
(``model-SHA.onnx`` in the bundle folder, written by ``Bundle.save``), and
encodes with onnxruntime when it is installed: no torch needed to predict.
A trained trunk computes its stem as table lookups (byte ``v`` at kernel
offset ``t`` adds a precomputed row), the same numbers as the strided
convolution it trains as; its blocks run channels last; its bag is scaled
after the table product. ``ByteTrunk.drop_graph`` makes the next save export
the graph anew (a bundle keeps the graph it was saved with).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError, ManyheadsError, require
from ..heads.fused import KINDS
from .base import check_texts, config_fingerprint, l2_normalise
from .onnxrt import SideBySide, read_graph

# settings added after the first byte bundles, with the values that leave them out
_LATER: dict[str, Any] = {"grams": 3, "bag": 0, "bag_dim": 64, "int8": False, "bag_norm": "mean"}
BAG_NORMS = ("l2log", "mean")
BAG_INITS = ("small", "normal")
SPREADS = ("batches", "ops")  # how ByteTrunk.encode shares the CPUs (see ByteTrunk)
# how a trained trunk computes its stem (graphs and torch alike): "lookup", table lookups,
# or "conv", the strided convolution it trains as (equal up to rounding; bench/byte_speed.py
# times both)
_STEM = "lookup"
_PRIMES = (7919, 104729, 1299709, 15485863)  # hash multipliers of the bytes before
PAD, SEP = 0, 257  # byte b is token b + 1; 257 joins a long text's head and tail
VOCAB = 258


@dataclass(frozen=True)
class ByteConfig:
    """Shape of a byte trunk (everything that changes its vectors besides weights).

    ``stride``: the stem convolution (``stem`` bytes wide) steps this many bytes, so
    the blocks run on ``max_bytes / stride`` positions; ``heads`` = 0 leaves out
    the attention layer; ``bag`` > 0 adds a bag of hashed byte n-grams beside the
    convolutions. The defaults are the shape measured best (see the README).
    """

    max_bytes: int = 1024
    embed: int = 32
    channels: int = 96
    stride: int = 8
    stem: int = 16
    dilations: tuple[int, ...] = (1, 2, 4, 8)
    kernel: int = 5
    heads: int = 0
    dims: tuple[int, ...] = (32, 64, 128, 256)
    ngrams: int = 0  # > 0: also embed hashed byte 2- to `grams`-grams into this many buckets
    grams: int = 4  # longest hashed byte n-gram (2-5) of `ngrams` and `bag`
    bag: int = 16384  # > 0: a bag of hashed byte 1- to `grams`-grams (own table, this many
    # buckets), weighed by `bag_norm`, joins the pooled features (what n-gram language
    # identifiers do; it generalises where the convolutions memorise)
    bag_dim: int = 128  # width of the bag's vectors
    int8: bool = True  # the bag's table kept as int8 with a scale per row (4x smaller)
    bag_norm: str = "l2log"  # how a text's n-gram counts weigh its bag rows: "l2log",
    # log(1 + count) scaled to unit length (as sublinear TF-IDF does), or "mean"

    def __post_init__(self) -> None:
        ints = {"max_bytes": self.max_bytes, "embed": self.embed, "channels": self.channels}
        more = {"kernel": self.kernel, "stride": self.stride, "stem": self.stem}
        for name, value in {**ints, **more, "heads": self.heads, "ngrams": self.ngrams}.items():
            low = 0 if name in ("heads", "ngrams") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                kind = "a non-negative" if low == 0 else "a positive"
                raise ConfigError(f"byte trunk {name} must be {kind} integer, got {value!r}")
        if self.max_bytes < 16:
            raise ConfigError(f"byte trunk max_bytes must be >= 16, got {self.max_bytes}")
        if self.kernel % 2 == 0:
            raise ConfigError(f"byte trunk kernel must be odd, got {self.kernel}")
        if self.stem < self.stride or (self.stem - self.stride) % 2:
            raise ConfigError(
                "byte trunk stem must be >= stride and differ from it by an even number, "
                f"got stem={self.stem}, stride={self.stride}"
            )
        if (
            not isinstance(self.grams, int)
            or isinstance(self.grams, bool)
            or not 2 <= self.grams <= 5
        ):
            raise ConfigError(
                f"byte trunk grams must be an integer from 2 to 5, got {self.grams!r}"
            )
        if not isinstance(self.bag_dim, int) or isinstance(self.bag_dim, bool) or self.bag_dim < 1:
            raise ConfigError(
                f"byte trunk bag_dim must be a positive integer, got {self.bag_dim!r}"
            )
        if not isinstance(self.int8, bool):
            raise ConfigError(f"byte trunk int8 must be true or false, got {self.int8!r}")
        if self.bag_norm not in BAG_NORMS:
            raise ConfigError(
                f"byte trunk bag_norm must be one of {', '.join(BAG_NORMS)}, got {self.bag_norm!r}"
            )
        if not isinstance(self.bag, int) or isinstance(self.bag, bool) or self.bag < 0:
            raise ConfigError(f"byte trunk bag must be a non-negative integer, got {self.bag!r}")
        if self.heads and self.channels % self.heads:
            raise ConfigError("byte trunk channels must be a multiple of heads")
        dims = tuple(self.dims)
        if not dims or list(dims) != sorted(set(dims)) or dims[0] < 1:
            raise ConfigError(f"byte trunk dims must be increasing positive sizes, got {dims}")
        if not self.dilations or any(
            not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in self.dilations
        ):
            raise ConfigError(f"byte trunk dilations must be positive, got {self.dilations}")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["dilations"], out["dims"] = list(self.dilations), list(self.dims)
        for key, value in _LATER.items():  # at the value that means "not there": left
            if out[key] == value:  # out, so older bundles' fingerprints stay as they were
                del out[key]
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ByteConfig:
        """The config of a saved trunk (``to_json``): a setting it lacks did not exist
        when it was saved, and takes the value that means "not there"."""
        return cls.from_settings({**_LATER, **doc})

    @classmethod
    def from_settings(cls, doc: dict[str, Any]) -> ByteConfig:
        """A config from some of its fields (the rest at their defaults), checked."""
        known = set(cls.__dataclass_fields__)
        unknown = set(doc) - known
        if unknown:
            raise ConfigError(f"unknown byte trunk settings: {', '.join(sorted(unknown))}")
        doc = dict(doc)
        for key in ("dilations", "dims"):
            if key in doc:
                doc[key] = tuple(doc[key])
        return cls(**doc)


def byte_ids(
    texts: Sequence[str], max_bytes: int, multiple: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, lengths)``: each text's UTF-8 bytes as tokens (byte + 1), padded with 0;
    ``lengths`` are rounded up to a ``multiple`` (the trunk's downsampling).

    A text longer than ``max_bytes`` bytes is read as its first and last
    ``(max_bytes - 1) // 2`` bytes joined by the separator token.
    """
    half = (max_bytes - 1) // 2
    parts, seps = [], []  # seps: (row, column) of each separator token
    for i, text in enumerate(texts):
        raw = text.encode("utf-8", "replace")
        if len(raw) > max_bytes:
            raw = raw[:half] + b"\0" + raw[-half:]
            seps.append((i, half))
        elif not raw:  # an empty text still has one position
            raw = b"\0"
            seps.append((i, 0))
        parts.append(raw)
    sizes = np.fromiter((len(r) for r in parts), dtype=np.int64, count=len(parts))
    lengths = -(-sizes // multiple) * multiple
    ids = np.zeros((len(parts), int(lengths.max()) if len(parts) else 1), dtype=np.int64)
    if len(parts):  # every byte into its row at once (a row per text in Python is slow)
        flat = np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.int64) + 1
        ids[np.arange(ids.shape[1]) < sizes[:, None]] = flat  # row-major, as joined
    for i, j in seps:
        ids[i, j] = SEP
    return ids, lengths


def _bag_shapes(config: ByteConfig) -> dict[str, tuple[int, ...]]:
    rows = VOCAB + config.bag
    if not config.bag:
        return {}
    if config.int8:
        return {"bag.q": (rows, config.bag_dim), "bag.scale": (rows,)}
    return {"bag.weight": (rows, config.bag_dim)}


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


def quantize_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)``: ``table`` as int8 rows with one float scale each (symmetric)."""
    table = np.asarray(table, dtype=np.float32)
    scale = np.abs(table).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(table / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def expected_shapes(config: ByteConfig) -> dict[str, tuple[int, ...]]:
    """The weight shapes of a byte trunk with ``config`` (checked without torch)."""
    c, e, d = config.channels, config.embed, config.dims[-1]
    shapes: dict[str, tuple[int, ...]] = {
        "embed.weight": (VOCAB, e),
        **({"ngram.weight": (config.ngrams, e)} if config.ngrams else {}),
        **_bag_shapes(config),
        "stem.weight": (c, e, config.stem),
        "stem.bias": (c,),
    }
    for i in range(len(config.dilations)):
        shapes[f"blocks.{i}.depth.weight"] = (c, 1, config.kernel)
        shapes[f"blocks.{i}.depth.bias"] = (c,)
        shapes[f"blocks.{i}.point.weight"] = (c, c, 1)
        shapes[f"blocks.{i}.point.bias"] = (c,)
        shapes[f"blocks.{i}.norm.weight"] = (c,)
        shapes[f"blocks.{i}.norm.bias"] = (c,)
    if config.heads:
        shapes.update(
            {
                "attn.in_proj_weight": (3 * c, c),
                "attn.in_proj_bias": (3 * c,),
                "attn.out_proj.weight": (c, c),
                "attn.out_proj.bias": (c,),
                "attn_norm.weight": (c,),
                "attn_norm.bias": (c,),
            }
        )
    shapes["out.weight"] = (d, 3 * c + (config.bag_dim if config.bag else 0))
    shapes["out.bias"] = (d,)
    return shapes


def _build_module(
    config: ByteConfig,
    dropout: float = 0.0,
    path_dropout: float = 0.0,
    train: bool = False,
    bag_init: str = "small",
) -> Any:
    """The torch module of a byte trunk. Training only: ``dropout`` drops embedded
    positions' features and the pooled features; ``path_dropout`` leaves out the
    convolutions' features of that share of texts, so the bag learns to answer alone;
    ``train`` gives an int8 bag table float weights (quantised after training),
    started as ``bag_init`` says."""
    torch = require("torch", "transformers")
    nn = torch.nn
    f = nn.functional

    class Block(nn.Module):  # type: ignore[name-defined]
        """Residual depthwise-separable convolution: a dilated per-channel filter, then a
        1x1 mix of channels, layer norm, GELU."""

        def __init__(self, channels: int, kernel: int, dilation: int) -> None:
            super().__init__()
            pad = dilation * (kernel // 2)
            self.depth = nn.Conv1d(
                channels, channels, kernel, padding=pad, dilation=dilation, groups=channels
            )
            self.point = nn.Conv1d(channels, channels, 1)
            self.norm = nn.LayerNorm(channels)

        def forward(self, x: Any, mask: Any) -> Any:  # x: B x L x C, mask: B x L x 1
            # channels last: the 1x1 mix is a matrix product and the norm needs no
            # transposing (only the per-channel filter runs channels first)
            y = self.depth((x * mask).transpose(1, 2)).transpose(1, 2)
            y = f.linear(y, self.point.weight.squeeze(-1), self.point.bias)
            return x + f.gelu(self.norm(y))

    class QuantTable(nn.Module):  # type: ignore[name-defined]
        """An embedding table kept as int8 rows times a float scale per row."""

        def __init__(self, rows: int, dim: int) -> None:
            super().__init__()
            self.register_buffer("q", torch.zeros(rows, dim, dtype=torch.int8))
            self.register_buffer("scale", torch.ones(rows))

        def forward(self, ids: Any) -> Any:
            return self.q[ids].to(torch.float32) * self.scale[ids].unsqueeze(-1)

        def mix(self, counts: Any) -> Any:
            """``counts @ table`` (rows of counts over the table's rows)."""
            # the float table is a function of the weights alone: onnxruntime computes it
            # once when it loads the graph (the file keeps the int8 table)
            return counts @ (self.q.to(torch.float32) * self.scale.unsqueeze(1))

    class ByteEncoder(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            c = config.channels
            self.embed = nn.Embedding(VOCAB, config.embed, padding_idx=PAD)
            if config.ngrams:
                self.ngram = nn.Embedding(config.ngrams, config.embed)
            self.stem = nn.Conv1d(
                config.embed,
                c,
                config.stem,
                stride=config.stride,
                padding=(config.stem - config.stride) // 2,
            )
            self.blocks = nn.ModuleList(Block(c, config.kernel, d) for d in config.dilations)
            if config.heads:
                self.attn = nn.MultiheadAttention(c, config.heads, batch_first=True)
                self.attn_norm = nn.LayerNorm(c)
            if config.bag:
                rows = VOCAB + config.bag
                if config.int8 and not train:
                    self.bag: Any = QuantTable(rows, config.bag_dim)
                else:
                    self.bag = nn.Embedding(rows, config.bag_dim, padding_idx=PAD)
                    if bag_init == "small":  # see train_byte_trunk
                        with torch.no_grad():
                            self.bag.weight.uniform_(-1.0 / config.bag_dim, 1.0 / config.bag_dim)
                            self.bag.weight[PAD] = 0.0
            self.out = nn.Linear(3 * c + (config.bag_dim if config.bag else 0), config.dims[-1])
            self.drop = nn.Dropout(dropout)

        def _attend(self, x: Any, keep: Any) -> Any:
            """Multi-head self-attention over the non-padding positions, written out with
            the weights of ``self.attn`` (its fused kernel does not export to ONNX)."""
            b, n, c = x.shape
            h = config.heads
            q, k, v = f.linear(x, self.attn.in_proj_weight, self.attn.in_proj_bias).chunk(3, -1)
            q, k, v = (t.reshape(b, n, h, c // h).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(c // h)
            scores = scores.masked_fill(~keep[:, None, None, :], -1e9)
            out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
            return f.linear(out, self.attn.out_proj.weight, self.attn.out_proj.bias)

        def _grams(self, ids: Any, buckets: int) -> list[Any]:
            """Hashed byte 2- to ``config.grams``-gram ids ending at each byte."""
            key, out = ids * 31, []
            for n in range(1, config.grams):
                key = key + f.pad(ids, (n, 0))[:, :-n] * _PRIMES[n - 1]
                out.append((key + n) % buckets)
            return out

        def _bag(self, ids: Any) -> Any:
            """The text's bag vector: its bytes' and n-grams' rows of the bag table,
            weighed by their counts in the text (``bag_norm``)."""
            keep = (ids != PAD).to(torch.float32)
            grams = [g + VOCAB for g in self._grams(ids, config.bag)]
            # count each row's uses per text (padding adds 0), then one matrix product with
            # the table (far less memory traffic than gathering a row per byte and n-gram)
            idx = torch.cat([ids, *grams], 1)
            counts = torch.zeros(ids.shape[0], VOCAB + config.bag).scatter_add(
                1, idx, keep.repeat(1, config.grams)
            )
            if config.bag_norm == "mean":
                weights, scale = counts, keep.sum(1, keepdim=True).clamp(min=1.0)
            else:  # "l2log": log(1 + count), unit length
                weights = torch.log1p(counts)
                scale = torch.linalg.vector_norm(weights, dim=1, keepdim=True).clamp(min=1e-6)
            # the product first, the scaling after: the (texts x rows) matrix is read once
            if isinstance(self.bag, QuantTable):
                return self.bag.mix(weights) / scale
            return (weights @ self.bag.weight) / scale

        def _stem_lookup(self, ids: Any) -> Any:
            """``stem(embed(ids))`` (channels last) as table lookups: byte ``v`` at offset
            ``t`` of the stem's kernel adds ``stem.weight[:, :, t] @ embed.weight[v]``,
            so each output sums ``stem`` rows of a (kernel x bytes x channels) table, a
            function of the weights alone (onnxruntime computes it when it loads the
            graph) instead of a (kernel x embed x channels) product per position."""
            s, k = config.stride, config.stem
            edge = torch.zeros(1, config.embed)  # the convolution's zero padding: row VOCAB
            table = torch.einsum(
                "cet,ve->tvc", self.stem.weight, torch.cat([self.embed.weight, edge])
            )
            left = (k - s) // 2
            padded = f.pad(ids, (left, k - s - left), value=VOCAB)
            n = ids.shape[1] // s
            # the t-th byte under each output position, as a row of table t
            rows = torch.stack(
                [padded[:, t : t + s * (n - 1) + 1 : s] + t * (VOCAB + 1) for t in range(k)], -1
            )
            return self.stem.bias + table.reshape(-1, table.shape[-1])[rows].sum(2)

        def _embed(self, ids: Any) -> Any:
            x = self.embed(ids)
            if config.ngrams:  # hashed n-grams ending at each byte (0 before the text)
                real = (ids != PAD).unsqueeze(-1).to(x.dtype)
                x = x + sum(self.ngram(g) for g in self._grams(ids, config.ngrams)) * real
            return x

        def forward(self, ids: Any, parts: bool = False) -> Any:  # ids: padded to the stride
            if self.training or config.ngrams or _STEM == "conv":
                x = self.stem(self.drop(self._embed(ids)).transpose(1, 2)).transpose(1, 2)
            else:
                x = self._stem_lookup(ids)  # B x L/stride x C
            keep = (ids != PAD).reshape(ids.shape[0], -1, config.stride).any(-1)
            mask = keep.unsqueeze(-1).to(x.dtype)
            for block in self.blocks:
                x = block(x, mask)
            if config.heads:
                x = self.attn_norm(x + self._attend(x, keep))
            x = x * mask
            n = mask.sum(1).clamp(min=1.0)
            mean = x.sum(1) / n
            var = ((x - mean.unsqueeze(1)) ** 2 * mask).sum(1) / n
            big = torch.finfo(x.dtype).max
            mx = x.masked_fill(~keep.unsqueeze(-1), -big).amax(1)
            conv = torch.cat([mean, mx, torch.sqrt(var + 1e-6)], dim=1)
            bag = self._bag(ids) if config.bag else None
            if bag is not None:
                if self.training and path_dropout:  # some texts learn from the bag alone
                    keep_conv = torch.rand(conv.shape[0], 1) >= path_dropout
                    conv = conv * keep_conv.to(conv.dtype)
                conv = torch.cat([conv, bag], dim=1)
            emb = self.out(self.drop(conv))
            return (emb, bag) if parts else emb

    return ByteEncoder()


@dataclass
class ByteTrainSummary:
    """What :func:`train_byte_trunk` did."""

    epochs: int
    steps: int
    seconds: float
    losses: list[float] = field(default_factory=list)  # mean loss per epoch
    task_weights: dict[str, float] = field(default_factory=dict)  # exp(-s) at the end


def _targets(
    name: str, labels: Sequence[Any], kind: str
) -> tuple[np.ndarray, list[Any], np.ndarray]:
    """Class indices (multiclass / binary) or a 0/1 matrix (multilabel), the classes, and
    which rows have a label (``None`` = this text is not labelled for this task)."""
    if kind not in KINDS:
        raise ConfigError(f"task {name!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    present = np.array([v is not None for v in labels], dtype=bool)
    if not present.any():
        raise DataError(f"task {name!r}: no text has a label")
    if kind == "multilabel":
        sets = []
        for i, v in enumerate(labels):
            if v is not None and not isinstance(v, list | tuple | set | frozenset):
                raise DataError(f"task {name!r}: label #{i} must be a list of labels")
            sets.append({str(x) for x in v} if v is not None else set())
        classes = sorted(set().union(*sets))
        if not classes:
            raise DataError(f"task {name!r}: no label at all")
        index = {c: j for j, c in enumerate(classes)}
        y = np.zeros((len(sets), len(classes)), dtype=np.float32)
        for i, s in enumerate(sets):
            y[i, [index[c] for c in s]] = 1.0
        return y, list(classes), present
    values = [str(v) if v is not None else None for v in labels]
    classes = sorted({v for v in values if v is not None})
    if len(classes) < 2:
        raise DataError(f"task {name!r}: needs at least two classes, got {classes}")
    index = {c: j for j, c in enumerate(classes)}
    y = np.array([index[v] if v is not None else -100 for v in values], dtype=np.int64)
    return y, list(classes), present


def _length_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Shuffled batches of texts of similar length (less padding): shuffle, sort within
    windows of 50 batches, cut, shuffle the batches."""
    order = rng.permutation(len(lengths))
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _crop(
    ids: np.ndarray, share: float, least: int, multiple: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` with a ``share`` of its rows longer than ``least`` bytes replaced by a random
    piece of themselves (see ``train_byte_trunk``), re-padded to a ``multiple``; and which
    rows were cut."""
    sizes = (ids != PAD).sum(1)
    cut = (rng.random(len(ids)) < share) & (sizes > least)
    if not cut.any():
        return ids, cut
    out = np.where(cut[:, None], PAD, ids)
    ends = sizes.copy()
    for i in np.flatnonzero(cut):
        n = int(sizes[i])
        size = int(np.exp(rng.uniform(np.log(least), np.log(n))))
        start = int(rng.integers(0, n - size + 1))
        stop = start + size
        row = ids[i]
        # UTF-8 continuation bytes (0x80-0xBF, tokens 129-192) do not start or end a piece
        while start < stop - 1 and 129 <= row[start] <= 192:
            start += 1
        while stop < n and 129 <= row[stop] <= 192:
            stop += 1
        out[i, : stop - start] = row[start:stop]
        ends[i] = stop - start
    width = int(-(-ends.max() // multiple) * multiple)
    return out[:, :width], cut


def train_byte_trunk(
    texts: Sequence[str],
    tasks: dict[str, tuple[Sequence[Any], str]],
    *,
    config: ByteConfig | None = None,
    epochs: int = 4,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    weighting: str = "chance",
    dropout: float = 0.0,
    path_dropout: float = 0.5,
    bag_init: str = "small",
    crop: float = 0.0,
    crop_tasks: Sequence[str] | None = None,
    crop_min: int = 16,
    threads: int | None = None,
    progress: bool = False,
) -> tuple[ByteTrunk, ByteTrainSummary]:
    """Train a byte trunk on ``texts`` jointly for ``tasks`` (``{name: (labels, kind)}``;
    a label may be ``None``: that text does not count for that task).

    Every task gets one linear head per nested dimension; its loss is the
    mean over dimensions (Matryoshka), divided by the task's loss at chance
    (``weighting="chance"``) or weighted by learned uncertainty
    (``"uncertainty"``, which favours easy tasks). With a bag (``config.bag``),
    every task also has a head on the bag alone (its loss added), and the
    convolutions' features of a ``path_dropout`` share of the texts are left
    out. ``dropout``: on the embedded bytes and the pooled features.
    ``bag_init``: the bag table starts ``"small"`` (uniform in ±1/``bag_dim``, as
    fastText starts its n-gram vectors) or ``"normal"`` (torch's N(0, 1), the
    earlier training: every rarely seen row stays loud noise in the texts that
    have it; it scored 0.77 on code and 0.83 on language where ``"small"``
    scored 0.83 and 0.87, bench/byte_shapes.py). ``crop``: that share of the
    texts longer than ``crop_min`` bytes is read, anew at every epoch, as a
    random piece of itself (a random start; a length from ``crop_min`` bytes to
    the whole, evenly spread on a log scale; cut at character boundaries), so
    the trunk sees short texts of every kind and cannot learn a text by heart;
    a piece keeps its labels for the tasks in ``crop_tasks`` (default: every
    task) and counts for no other (a piece of a text holding a key may not hold
    it). AdamW with a one-cycle learning rate. Returns the trunk (its training
    heads dropped) and a summary.
    """
    import time

    torch = require("torch", "transformers")
    config = config or ByteConfig()
    texts = check_texts(texts)
    if not texts:
        raise DataError("no training texts")
    if not tasks:
        raise DataError("give at least one task to train the byte trunk on")
    for name, value in tasks.items():
        if not isinstance(value, tuple) or len(value) != 2:
            raise DataError(f"task {name!r}: give (labels, kind)")
        if len(value[0]) != len(texts):
            raise DataError(f"task {name!r}: {len(value[0])} labels for {len(texts)} texts")
    if bag_init not in BAG_INITS:
        raise ConfigError(f"bag_init must be one of {', '.join(BAG_INITS)}, got {bag_init!r}")
    if weighting not in ("chance", "uncertainty"):
        raise ConfigError(f"weighting must be 'chance' or 'uncertainty', got {weighting!r}")
    if epochs < 1 or batch_size < 1 or not lr > 0:
        raise ConfigError("epochs and batch_size must be positive, lr > 0")
    for setting, rate in (("dropout", dropout), ("path_dropout", path_dropout), ("crop", crop)):
        if not isinstance(rate, int | float) or not 0.0 <= rate < 1.0:
            raise ConfigError(f"{setting} must be in [0, 1), got {rate!r}")
    if not isinstance(crop_min, int) or isinstance(crop_min, bool) or crop_min < 1:
        raise ConfigError(f"crop_min must be a positive integer, got {crop_min!r}")
    keep_on_crop = set(tasks) if crop_tasks is None else set(crop_tasks)
    if keep_on_crop - set(tasks):
        unknown = ", ".join(sorted(keep_on_crop - set(tasks)))
        raise ConfigError(f"crop_tasks names tasks not trained: {unknown}")
    targets = {n: _targets(n, labels, kind) for n, (labels, kind) in tasks.items()}
    kinds = {n: kind for n, (_, kind) in tasks.items()}
    t0 = time.perf_counter()
    if threads:
        torch.set_num_threads(threads)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = _build_module(
        config, dropout, path_dropout if config.bag else 0.0, train=True, bag_init=bag_init
    )
    nn = torch.nn
    heads = nn.ModuleDict(
        {
            n: nn.ModuleList(nn.Linear(d, len(classes)) for d in config.dims)
            for n, (_, classes, _) in targets.items()
        }
    )
    bag_heads = nn.ModuleDict(  # the bag alone answers every task too (its own loss)
        {
            n: nn.Linear(config.bag_dim, len(classes))
            for n, (_, classes, _) in targets.items()
            if config.bag
        }
    )
    log_var = nn.Parameter(torch.zeros(len(targets)), requires_grad=weighting == "uncertainty")
    chance = {
        n: math.log(2.0) if kinds[n] == "multilabel" else math.log(len(classes))
        for n, (_, classes, _) in targets.items()
    }
    params = [*model.parameters(), *heads.parameters(), *bag_heads.parameters(), log_var]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(texts) / batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=epochs * steps_per_epoch, pct_start=0.1
    )
    ids_all, lengths = byte_ids(texts, config.max_bytes, config.stride)
    names = list(targets)
    from .._progress import progress_bar

    summary = ByteTrainSummary(epochs=epochs, steps=0, seconds=0.0)
    model.train()
    with progress_bar(total=epochs * steps_per_epoch, desc="byte trunk", enabled=progress) as bar:
        for _ in range(epochs):
            total = 0.0
            for rows in _length_batches(lengths, batch_size, rng):
                width = int(lengths[rows].max())
                batch = ids_all[rows, :width]
                cropped = np.zeros(len(rows), dtype=bool)
                if crop:
                    batch, cropped = _crop(batch, crop, crop_min, config.stride, rng)
                ids = torch.from_numpy(batch)
                emb, bag = model(ids, parts=True)
                loss = torch.zeros(())
                for k, name in enumerate(names):
                    y_all, _, present_all = targets[name]
                    present = present_all[rows]
                    if name not in keep_on_crop:
                        present = present & ~cropped
                    if not present.any():
                        continue
                    y = torch.from_numpy(y_all[rows[present]])
                    sub = emb[torch.from_numpy(present)]
                    lossf = (
                        nn.functional.binary_cross_entropy_with_logits
                        if kinds[name] == "multilabel"
                        else nn.functional.cross_entropy
                    )
                    task_loss = sum(
                        lossf(head(sub[:, :d]), y)
                        for d, head in zip(config.dims, heads[name], strict=True)
                    ) / len(config.dims)
                    if name in bag_heads:
                        task_loss = task_loss + lossf(
                            bag_heads[name](bag[torch.from_numpy(present)]), y
                        )
                    if weighting == "chance":
                        loss = loss + task_loss / chance[name]
                    else:
                        loss = loss + torch.exp(-log_var[k]) * task_loss + log_var[k]
                bar.update(1)
                if not loss.requires_grad:  # no text of this batch counts for any task
                    continue
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(rows)
                summary.steps += 1
            summary.losses.append(total / len(texts))
    model.eval()
    summary.seconds = time.perf_counter() - t0
    summary.task_weights = {
        n: 1.0 / chance[n] if weighting == "chance" else float(torch.exp(-log_var[k]).detach())
        for k, n in enumerate(names)
    }
    state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    if config.bag and config.int8:
        state["bag.q"], state["bag.scale"] = quantize_rows(state.pop("bag.weight"))
    return ByteTrunk(config, state=state), summary


class ByteTrunk:
    """The trained byte encoder as a trunk. ``tier`` picks the nested dimension served
    (default: the largest); vectors are the first ``tier`` numbers, L2-normalised.

    With onnxruntime, ``encode`` runs its batches side by side, one thread each
    (``MANYHEADS_THREADS`` of them, default the usable CPUs), each batch on one core:
    the graph's operations are too small to share between cores well (``spread =
    "ops"`` runs one batch at a time over every core instead; bench/byte_speed.py
    times both)."""

    cacheable = True
    spread = "batches"

    def __init__(
        self,
        config: ByteConfig | dict[str, Any] | None = None,
        *,
        state: dict[str, np.ndarray] | None = None,
        tier: int | None = None,
        name: str = "byte",
        batch_size: int = 32,
        graph: str | None = None,
        graph_sha256: str | None = None,
        folder: str | Path | None = None,
    ) -> None:
        if isinstance(config, dict):
            config = ByteConfig.from_json(config)
        self.config = config or ByteConfig()
        self.name = name
        if tier is None:
            tier = self.config.dims[-1]
        if tier not in self.config.dims:
            raise ConfigError(
                f"byte trunk tier must be one of {list(self.config.dims)}, got {tier!r}"
            )
        self.tier = int(tier)
        self.batch_size = int(batch_size)
        self._state: dict[str, np.ndarray] = {}
        self._module: Any = None
        self._held_by: str | None = None  # SHA-256 of a graph known to hold these weights
        self._session: Any = None
        self._session_spread = self.spread  # the spread the session was opened for
        self._side = SideBySide("manyheads-byte")  # the threads of spread "batches"
        self._fingerprint: str | None = None
        # the ONNX graph of these weights (a file in ``folder``), if written
        self.graph, self.graph_sha256 = graph, graph_sha256
        self.folder = Path(folder) if folder is not None else None
        if graph is not None and (self.folder is None or not (self.folder / graph).is_file()):
            raise ManyheadsError(f"the byte trunk's graph {graph} is missing from {self.folder}")
        if state:
            self.load_state(state)

    @property
    def dim(self) -> int:
        return self.tier

    def _weights(self) -> dict[str, np.ndarray]:
        """The weights: as given, else read once from the graph's initializers (a bundle
        whose graph holds every weight unchanged stores them there only)."""
        if not self._state and self.graph is not None and self.folder is not None:
            where = self.folder / self.graph
            found = graph_initializers(where, set(expected_shapes(self.config)), self.graph_sha256)
            self._state = self._checked(found, f" (read from {where})")
            self._held_by = self.graph_sha256
        if not self._state:
            raise ManyheadsError("the byte trunk has no weights yet: train it first")
        return self._state

    def weights_in_graph(self) -> bool:
        """Whether the graph file holds every weight under its name, unchanged (the
        exporter may merge equal tensors; then the weights are stored beside it)."""
        if self.graph is None or self.folder is None or not self._state:
            return False
        if self._held_by is not None and self._held_by == self.graph_sha256:
            return True  # read from that graph, or checked against it already
        try:
            found = graph_initializers(self.folder / self.graph, set(self._state))
        except ManyheadsError:  # no onnx package here: keep the weights beside the graph
            return False
        held = found.keys() == self._state.keys() and all(
            found[k].dtype == v.dtype and np.array_equal(found[k], v)
            for k, v in self._state.items()
        )
        self._held_by = self.graph_sha256 if held else None
        return held

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            state = self._weights()
            h = hashlib.sha256()
            for key in sorted(state):
                h.update(key.encode())
                h.update(np.ascontiguousarray(state[key]).tobytes())
            extra = {**self.config.to_json(), "tier": self.tier}
            self._fingerprint = config_fingerprint("byte", extra, h.digest())
        return self._fingerprint

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": "byte", "config": self.config.to_json(), "tier": self.tier}
        if self.graph is not None:
            spec["graph"], spec["graph_sha256"] = self.graph, self.graph_sha256
        return spec

    def state(self) -> dict[str, np.ndarray]:
        return dict(self._weights())

    def _checked(self, state: dict[str, np.ndarray], where: str = "") -> dict[str, np.ndarray]:
        expected = expected_shapes(self.config)
        got = {k: tuple(np.asarray(v).shape) for k, v in state.items()}
        if got != expected:
            missing = sorted(set(expected) - set(got))
            wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
            raise ManyheadsError(
                "byte trunk weights do not match its config"
                + where
                + (f"; missing {missing[:3]}" if missing else "")
                + (f"; wrong shape {wrong[:3]}" if wrong else "")
            )
        return {
            k: np.asarray(v, dtype=np.int8 if k == "bag.q" else np.float32)
            for k, v in state.items()
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._state = self._checked(state)
        self._held_by = None
        self._module = None
        self._session = None
        self._fingerprint = None

    def with_tier(self, tier: int) -> ByteTrunk:
        """The same weights serving another nested dimension (same graph, batch size
        and spread)."""
        out = ByteTrunk(
            self.config, state=self._state, tier=tier, name=self.name, batch_size=self.batch_size
        )
        out.graph, out.graph_sha256, out.folder = self.graph, self.graph_sha256, self.folder
        if "spread" in vars(self):  # set on this trunk rather than on the class
            out.spread = self.spread
        return out

    def drop_graph(self) -> None:
        """Forget this trunk's ONNX graph (its weights read from it first): the next
        ``Bundle.save`` exports a new one, written by this version of manyheads (a
        bundle saved by an older one keeps its older graph until then)."""
        self._state = dict(self._weights())
        self.graph = self.graph_sha256 = self.folder = None
        self._session = None
        self._held_by = None

    def save_files(self, folder: Path) -> None:
        """Put this trunk's ONNX graph into ``folder`` (exported from the weights the first
        time, with torch; copied afterwards). Called by ``Bundle.save``."""
        from .._io import atomic_write_bytes

        if self.graph is not None and self.folder is not None:
            target = folder / self.graph
            if not target.exists():
                atomic_write_bytes(target, (self.folder / self.graph).read_bytes())
            self.folder = folder
            return
        blob = self._export_graph()
        sha = hashlib.sha256(blob).hexdigest()
        name = f"model-{sha[:12]}.onnx"
        if not (folder / name).exists():
            atomic_write_bytes(folder / name, blob)
        self.graph, self.graph_sha256, self.folder = name, sha, folder

    def _export_graph(self) -> bytes:
        import io

        torch = require("torch", "transformers")
        module = self._ensure()
        buf = io.BytesIO()
        example = torch.from_numpy(
            byte_ids(["example text", "x"], self.config.max_bytes, self.config.stride)[0]
        )
        import warnings

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

    def _onnx(self) -> Any:
        """An onnxruntime session on the graph, or None (no graph, or no onnxruntime);
        opened anew when ``spread`` changed since (its thread count follows it)."""
        if self.spread not in SPREADS:
            raise ConfigError(
                f"byte trunk spread must be one of {', '.join(SPREADS)}, got {self.spread!r}"
            )
        if self._session is not None and self._session_spread != self.spread:
            self._session = None
        if self._session is None and self.graph is not None and self.folder is not None:
            import importlib.util

            if importlib.util.find_spec("onnxruntime") is None:
                return None
            from .onnxrt import open_session

            threads = 1 if self.spread == "batches" else None  # None: every usable CPU
            self._session = open_session(
                self.folder / self.graph, self.graph_sha256, threads=threads, hint=""
            )
            self._session_spread = self.spread
        return self._session

    def _ensure(self) -> Any:
        if self._module is None:
            torch = require("torch", "transformers")
            module = _build_module(self.config)
            module.load_state_dict({k: torch.from_numpy(v) for k, v in self._weights().items()})
            module.eval()
            self._module = module
        return self._module

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids, lengths = byte_ids(texts, self.config.max_bytes, self.config.stride)
        order = np.argsort(lengths, kind="stable")  # similar lengths together: less padding
        out = np.empty((len(texts), self.tier), dtype=np.float32)
        size = batch_size or self.batch_size
        session = self._onnx()
        pool = None
        if session is not None:
            pool = self._side.pool() if self.spread == "batches" else None
            if pool is not None:  # a batch for every thread, when there are texts enough
                size = max(1, min(size, -(-len(texts) // self._side.size)))

            def run(batch: np.ndarray) -> np.ndarray:
                return session.run(["embedding"], {"ids": batch})[0]

        else:
            torch = require("torch", "transformers")
            module = self._ensure()

            def run(batch: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(batch)).numpy()

        groups = [order[start : start + size] for start in range(0, len(texts), size)]

        def one(rows: np.ndarray) -> None:
            out[rows] = run(ids[rows, : int(lengths[rows].max())])[:, : self.tier]

        if pool is not None and len(groups) > 1:
            for _ in pool.map(one, groups):  # onnxruntime lets go of the GIL while it runs
                pass
        else:
            for rows in groups:
                one(rows)
        return l2_normalise(out)

    def __repr__(self) -> str:
        return f"ByteTrunk(tier={self.tier}, dims={list(self.config.dims)})"
