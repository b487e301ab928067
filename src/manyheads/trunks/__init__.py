"""Trunks turn texts into L2-normalised vectors.

``load_trunk`` accepts a name (``"minilm"``, ``"hashing"``), a path to a local
Hugging Face / sentence-transformers folder, a spec dict as stored in
``bundle.json``, or an object that already follows the :class:`Trunk` protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ManyheadsError
from .base import Trunk, l2_normalise
from .hashing import HashingTrunk
from .transformer import TransformerTrunk, minilm_path

__all__ = [
    "TRUNK_NAMES",
    "HashingTrunk",
    "TransformerTrunk",
    "Trunk",
    "l2_normalise",
    "load_trunk",
    "minilm_path",
]

TRUNK_NAMES = ("minilm", "hashing")


def _from_spec(spec: dict[str, Any]) -> Trunk:
    kind = spec.get("type")
    options = {k: v for k, v in spec.items() if k not in ("type", "version")}
    if kind == "hashing":
        if "ngram_range" in options:
            options["ngram_range"] = tuple(options["ngram_range"])
        return HashingTrunk(**options)
    if kind == "minilm":
        return TransformerTrunk(minilm_path(), name="minilm", registered=True, **options)
    if kind == "transformer":
        path = options.pop("path", None)
        if not path:
            raise ManyheadsError("a transformer trunk spec needs a 'path'")
        return TransformerTrunk(path, **options)
    raise ManyheadsError(f"unknown trunk type {kind!r}; known: minilm, hashing, transformer")


def load_trunk(trunk: str | Path | dict[str, Any] | Trunk) -> Trunk:
    """Build a trunk from a name, a folder path, a spec dict, or return a trunk as is."""
    if isinstance(trunk, dict):
        return _from_spec(trunk)
    if isinstance(trunk, Path | str):
        name = str(trunk)
        if name == "minilm":
            return _from_spec({"type": "minilm"})
        if name == "hashing":
            return _from_spec({"type": "hashing"})
        path = Path(name).expanduser()
        if path.is_dir():
            return TransformerTrunk(path)
        raise ManyheadsError(
            f"unknown trunk {name!r}: give one of {', '.join(TRUNK_NAMES)} "
            "or the path of a local model folder"
        )
    if isinstance(trunk, Trunk):
        return trunk
    raise TypeError(f"trunk must be a name, a path, a spec dict or a Trunk, got {type(trunk)!r}")
