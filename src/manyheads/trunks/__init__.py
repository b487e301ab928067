"""Trunks turn texts into L2-normalised vectors.

The trunk types a bundle's spec may name are kept in :mod:`.registry`
(:data:`TRUNK_TYPES`, :func:`register_trunk_type`).

``load_trunk`` accepts a name (``"minilm"``, ``"hashing"``), a path to a local
Hugging Face / sentence-transformers folder, a spec dict as stored in
``bundle.json``, or an object that already follows the :class:`Trunk` protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ManyheadsError
from .base import Features, Trunk, TrunkAdapter, TrunkBase, l2_normalise
from .composite import CompositeTrunk, encode_features
from .registry import (
    TRUNK_TYPES,
    check_spec,
    register_trunk_type,
    replace_part_spec,
    spec_name,
    spec_parts,
    trunk_from_spec,
    trunk_type,
)
from .transformer import MiniLMTrunk, TransformerTrunk, minilm_path

if TYPE_CHECKING:
    from .hashing import HashingTrunk

__all__ = [
    "HASHING_PRESETS",
    "TRUNK_NAMES",
    "TRUNK_TYPES",
    "CompositeTrunk",
    "Features",
    "HashingTrunk",
    "MiniLMTrunk",
    "TransformerTrunk",
    "Trunk",
    "TrunkAdapter",
    "TrunkBase",
    "check_spec",
    "encode_features",
    "l2_normalise",
    "load_trunk",
    "minilm_path",
    "register_trunk_type",
    "spec_name",
    "truncating",
    "trunk_from_spec",
]

from .presets import COMPOSITE_PRESETS, HASHING_PRESETS, TRUNK_NAMES


def __getattr__(name: str) -> Any:
    if name == "HashingTrunk":  # scikit-learn's hashing: imported on first use
        from .hashing import HashingTrunk

        return HashingTrunk
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_trunk(
    trunk: str | Path | dict[str, Any] | Trunk,
    *,
    state: dict[str, Any] | None = None,
    base: Path | None = None,
) -> TrunkBase:
    """Build a trunk from a name, a folder path, a spec dict, or return a trunk as is.

    Names: ``minilm``, ``hashing``, ``tfidf``, ``ngram``, ``static`` (``static:PATH``),
    ``fast`` (``static+ngram``), a model folder path, or several
    of these joined by ``+`` (a composite trunk), each optionally followed by
    ``@WEIGHT`` (``minilm@1+tfidf@0.5``). ``state`` holds fitted arrays (the
    idf of a hashing part) as saved in a bundle; ``base`` is the folder that
    relative model paths in a spec are relative to (the bundle's).
    """
    if isinstance(trunk, dict):
        built = trunk_from_spec(trunk, base)
    elif isinstance(trunk, Path | str):
        built = _from_name(str(trunk))
    elif isinstance(trunk, TrunkBase):
        return trunk
    elif isinstance(trunk, Trunk):
        return TrunkAdapter(trunk)
    else:
        raise TypeError(
            f"trunk must be a name, a path, a spec dict or a Trunk, got {type(trunk)!r}"
        )
    if state:
        built.load_state(state)
    return built


def truncating(trunk: str | Path | dict[str, Any] | TrunkBase, tokens: int) -> TrunkBase:
    """``trunk`` (anything :func:`load_trunk` takes) with every part that reads text in
    token windows (a transformer: ``minilm``, a model folder) reading a text's first
    ``tokens`` tokens only (its window ``max_length=tokens``, ``overflow="truncate"``):
    long texts cost one short window each, and the rest of them is not read. Its other
    parts are as they were. A trunk without such a part is refused in one line."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 8:
        raise ConfigError(
            f"{{truncate}} must be a number of tokens, at least 8, got {tokens!r}",
            options=("truncate",),
        )
    built = load_trunk(trunk)
    found = 0

    def cut(spec: dict[str, Any]) -> dict[str, Any]:
        nonlocal found
        parts = spec_parts(spec)  # a plain spec is its own one part
        if parts != [spec]:
            for i, part in enumerate(parts):
                spec = replace_part_spec(spec, i, cut(part))
            return spec
        if {"overflow", "max_length"} <= trunk_type(spec["type"]).spec_settings():
            found += 1
            return {**spec, "max_length": tokens, "overflow": "truncate"}
        return spec

    spec = cut(built.spec())
    if not found:
        raise ConfigError(
            f"{{truncate}}: trunk {built.name!r} has no part that reads text in token "
            "windows (a transformer such as minilm)",
            options=("truncate",),
        )
    try:
        return trunk_from_spec(spec, None)
    except ConfigError as exc:  # more tokens than the model has positions
        raise ConfigError(f"{{truncate}} {tokens}: {exc}", options=("truncate",)) from None


def _from_name(name: str) -> TrunkBase:
    if "+" in name and not Path(name).expanduser().is_dir():
        parts, weights = [], []
        for piece in name.split("+"):
            base, _, weight = piece.strip().partition("@")
            if not base:
                raise ManyheadsError(f"bad trunk {name!r}: empty part between '+'")
            try:
                weights.append(float(weight) if weight else 1.0)
            except ValueError:
                raise ManyheadsError(
                    f"bad trunk {name!r}: weight {weight!r} of part {base!r} is not a number"
                ) from None
            parts.append(_from_name(base))
        return CompositeTrunk(parts, weights)
    if name in COMPOSITE_PRESETS:
        return _from_name(COMPOSITE_PRESETS[name])
    if name == "minilm":
        return MiniLMTrunk()
    if name == "ngram":
        from .ngram import NgramTrunk

        return NgramTrunk()
    if name == "static" or name.startswith("static:"):
        from .static import static_trunk

        return static_trunk(name.partition(":")[2] or None)
    if name in HASHING_PRESETS:
        from .hashing import HashingTrunk

        return HashingTrunk(**HASHING_PRESETS[name])
    path = Path(name).expanduser()
    if path.is_dir():
        return TransformerTrunk(path)
    if name == "byte":
        raise ManyheadsError(
            "a byte trunk is trained on labelled texts, not loaded by name: use "
            "train_byte_trunk, or `manyheads train DATA -b NEW_BUNDLE --trunk byte`"
        )
    raise ManyheadsError(
        f"unknown trunk {name!r}: give one of {', '.join(TRUNK_NAMES)}, the path of a local "
        "model folder, or several joined by '+'"
    )
