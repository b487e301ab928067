"""A byte trunk's shape and its input: :class:`ByteConfig`, bytes as token ids, the
shapes of its weights. Needs numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError

# settings added after the first byte bundles, with the values that leave them out
_LATER: dict[str, Any] = {"grams": 3, "bag": 0, "bag_dim": 64, "int8": False, "bag_norm": "mean"}
BAG_NORMS = ("l2log", "mean")
BAG_INITS = ("small", "normal")
SPREADS = ("batches", "ops")  # how ByteTrunk.encode shares the CPUs (see ByteTrunk)
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
