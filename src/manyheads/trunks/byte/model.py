"""The torch module of a byte trunk (training, and encoding without onnxruntime)."""

from __future__ import annotations

import math
from typing import Any

from ...errors import require
from .config import _PRIMES, PAD, VOCAB, ByteConfig

# how a trained trunk computes its stem (graphs and torch alike): "lookup", table lookups,
# or "conv", the strided convolution it trains as (equal up to rounding;
# bench/byte_speed.py times both)
STEM = "lookup"


def build_module(
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
            if self.training or config.ngrams or STEM == "conv":
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
