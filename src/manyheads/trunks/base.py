"""The trunk protocol: texts in, L2-normalised float32 vectors out."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._text import unicode_problem
from ..errors import DataError


@runtime_checkable
class Trunk(Protocol):
    """What every trunk provides.

    ``name``
        Short human name (``"minilm"``, ``"hashing"``, a folder name).
    ``dim``
        Width of the vectors ``encode`` returns.
    ``fingerprint``
        Stable hash of the weights and every setting that changes the vectors.
        Heads are tied to it; the embedding cache is keyed by it.
    ``encode(texts)``
        ``float32`` array of shape ``(len(texts), dim)``, rows L2-normalised.
    ``spec()``
        JSON-serialisable description from which :func:`manyheads.load_trunk`
        rebuilds the same trunk (stored in ``bundle.json``).
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray: ...

    def spec(self) -> dict[str, Any]: ...


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return x / norms


def config_fingerprint(kind: str, config: dict[str, Any], *extra: bytes) -> str:
    """Hash of a trunk kind, its JSON config and any extra bytes (weights digests)."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    for chunk in extra:
        h.update(chunk)
    return h.hexdigest()[:16]


def check_texts(texts: Sequence[str]) -> list[str]:
    """Validate a batch of texts: a sequence of ``str`` (a bare string is refused), each
    valid Unicode (no lone surrogates)."""
    if isinstance(texts, str | bytes):
        raise DataError("texts must be a list of strings, not a single string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise DataError(f"text #{i} is {type(t).__name__}, expected str")
        problem = unicode_problem(t)
        if problem is not None:
            raise DataError(f"text #{i} {problem}")
    return out


def load_tokenizer_file(path: Path) -> Any:
    """A ``tokenizers`` tokenizer from its ``tokenizer.json`` (no truncation, no
    padding); an unreadable or malformed file is one line naming it."""
    from ..errors import ManyheadsError, require

    tokenizers = require("tokenizers", "transformers")
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ManyheadsError(f"cannot read the tokenizer {path}: {first}") from None
    tok.no_truncation()
    tok.no_padding()
    return tok
