"""A composite trunk: the weighted concatenation of several trunks' vectors.

``minilm+tfidf`` joins a pretrained encoder (meaning) with a character
n-gram trunk (surface form). Each part's vector is L2-normalised, multiplied
by its weight, and the concatenation is scaled back to unit length. Parts that
are fitted on training texts (a hashing trunk with idf) are fitted once, when
the bundle is created, and then frozen like any trunk.

Wide sparse parts (hashing) stay sparse: :meth:`encode_features` returns a
SciPy CSR matrix when any part is sparse, and heads and fusion work on it
directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from .base import Encoding, Features, TrunkAdapter, TrunkBase, check_texts
from .device import CPU, Device, DeviceLike
from .presets import COMPOSITE_PRESETS


def composite_name(names: list[str], weights: list[float] | None) -> str:
    """``a+b``, or ``a@1+b@0.5`` when the parts are weighted differently."""
    if not weights or len(set(weights)) == 1:
        return "+".join(names)
    return "+".join(f"{n}@{w:g}" for n, w in zip(names, weights, strict=True))


class CompositeTrunk(TrunkBase):
    """Concatenation of ``parts`` with per-part ``weights``."""

    type_name = "composite"
    runs_on = ("cpu", "cuda")  # where its parts do

    @classmethod
    def spec_parts(cls, options: dict[str, Any]) -> list[Any]:
        parts = options.get("parts")
        if not isinstance(parts, list) or not parts:
            raise ConfigError(f"a composite trunk spec needs a list of 'parts', got {parts!r}")
        return parts

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        from .registry import trunk_from_spec

        parts = [trunk_from_spec(p, base) for p in cls.spec_parts(options)]
        return cls(parts, options.get("weights"))

    @classmethod
    def spec_name(cls, options: dict[str, Any]) -> str | None:
        from .registry import spec_name

        names = [spec_name(p) for p in options.get("parts", [])]
        if any(n is None for n in names):
            return None
        name = composite_name([str(n) for n in names], options.get("weights"))
        return next((k for k, v in COMPOSITE_PRESETS.items() if v == name), name)

    def __init__(self, parts: Sequence[TrunkBase], weights: Sequence[float] | None = None) -> None:
        parts = [p if isinstance(p, TrunkBase) else TrunkAdapter(p) for p in parts]
        if len(parts) < 2:
            raise ConfigError(f"a composite trunk needs at least 2 parts, got {len(parts)}")
        weights = [1.0] * len(parts) if weights is None else [float(w) for w in weights]
        if len(weights) != len(parts):
            raise ConfigError(f"{len(parts)} trunk parts but {len(weights)} weights")
        if any(not w > 0 for w in weights):
            raise ConfigError(f"trunk part weights must be positive, got {weights}")
        self._parts = parts
        self.weights = weights
        self._name = composite_name([p.name for p in parts], weights)
        self._scale = [w / float(np.sqrt(sum(x * x for x in weights))) for w in weights]

    @property
    def dim(self) -> int:
        return sum(int(p.dim) for p in self.parts)

    @property
    def parts(self) -> list[TrunkBase]:
        return list(self._parts)

    @property
    def part_weights(self) -> list[float]:
        return list(self.weights)

    @property
    def needs_fit(self) -> bool:
        return any(p.needs_fit for p in self._parts)

    def fit(self, texts: Sequence[str]) -> CompositeTrunk:
        for p in self._parts:
            if p.needs_fit:
                p.fit(texts)
        return self

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256(b"composite")
        for p, w in zip(self.parts, self.weights, strict=True):
            h.update(p.fingerprint.encode())
            h.update(repr(w).encode())
        return h.hexdigest()[:16]

    def with_parts(self, parts: Sequence[TrunkBase]) -> TrunkBase:
        return CompositeTrunk(parts, self.weights)

    @property
    def device(self) -> Device:
        """The device of its part that runs on a GPU, if one does; else the CPU."""
        return next((p.device for p in self._parts if p.device.accelerated), CPU)

    def on_device(self, device: DeviceLike) -> TrunkBase:
        """Each part where it runs best: on ``device`` where its type can, else on the
        CPU (a TF-IDF or n-gram part: sparse products that a CPU does well)."""
        parts = [p.on_device(device) for p in self._parts]
        if all(new is old for new, old in zip(parts, self._parts, strict=True)):
            return self
        return self.with_parts(parts)

    def precise_twin(self) -> tuple[TrunkBase, Any] | None:
        for i, part in enumerate(self._parts):
            twin = part.precise_twin()
            if twin is not None:
                parts = list(self._parts)
                parts[i] = twin[0]
                return CompositeTrunk(parts, self.weights), twin[1]
        return None

    def spec(self) -> dict[str, Any]:
        return {
            "type": "composite",
            "parts": [p.spec() for p in self.parts],
            "weights": list(self.weights),
        }

    def state(self) -> dict[str, np.ndarray]:
        out = {}
        for i, p in enumerate(self._parts):
            for key, arr in p.state().items():
                out[f"parts/{i}/{key}"] = arr
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        for i, p in enumerate(self._parts):
            prefix = f"parts/{i}/"
            p.load_state({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})

    def save_files(self, folder: Path) -> None:
        for p in self._parts:
            p.save_files(folder)

    def combine(self, blocks: Sequence[Features]) -> Features:
        """Join the parts' (normalised) vectors with the part weights."""
        scaled = [b * s for b, s in zip(blocks, self._scale, strict=True)]
        if any(sp.issparse(b) for b in scaled):
            return sp.hstack([sp.csr_matrix(b) for b in scaled], format="csr", dtype=np.float32)
        return np.concatenate(scaled, axis=1).astype(np.float32)

    def encode_features(self, texts: Sequence[str], *, progress: bool = False) -> Features:
        texts = check_texts(texts)
        return self.combine([p.encode_features(texts, progress=progress) for p in self._parts])

    @property
    def encodes_meaning(self) -> bool:
        return any(p.encodes_meaning for p in self._parts)

    @property
    def meaning_columns(self) -> tuple[int, int] | None:
        at = 0
        for p in self._parts:
            found = p.meaning_columns
            if found is not None:
                return (at + found[0], at + found[1])
            at += int(p.dim)
        return None

    def encode_labels(self, texts: Sequence[str]) -> np.ndarray:
        """The parts that encode meaning encode the labels; the others give zeros."""
        if not self.encodes_meaning:
            return super().encode_labels(texts)
        texts = check_texts(texts)
        blocks = [
            p.encode_labels(texts) if p.encodes_meaning else np.zeros((len(texts), p.dim))
            for p in self._parts
        ]
        return np.asarray(self.combine(blocks), dtype=np.float32)

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        X: Any = self.encode_features(texts, progress=progress)
        return np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float32)

    @property
    def work_unit(self) -> str:
        """Tokens when a part counts them (a transformer), else characters."""
        units = {p.work_unit for p in self._parts}
        return "tokens" if "tokens" in units else "characters"

    def work(self, texts: Sequence[str]) -> list[int]:
        """The work of the parts that count in ``work_unit`` (the parts cheap per
        character are free beside a transformer's tokens)."""
        texts = check_texts(texts)
        unit = self.work_unit
        if unit != "tokens":
            return [len(t) for t in texts]
        counted = [p.work(texts) for p in self._parts if p.work_unit == unit]
        return [int(sum(column)) for column in zip(*counted, strict=True)]

    def encoding(self, texts: Sequence[str]) -> Encoding:
        """Each part's encoding in turn, joined as ``encode_features`` joins them; a
        part cheap per character costs nothing beside a transformer's tokens and is
        encoded whole in the first step."""
        texts = check_texts(texts)
        if self.work_unit != "tokens":
            return super().encoding(texts)
        unit = self.work_unit
        return _PartsEncoding(self, [(p.encoding(texts), p.work_unit == unit) for p in self._parts])

    def __repr__(self) -> str:
        return f"CompositeTrunk({self._parts!r}, weights={self.weights})"


class _PartsEncoding(Encoding):
    """A composite's parts encoded one after another; ``parts``: each part's encoding
    and whether its work counts."""

    def __init__(self, trunk: CompositeTrunk, parts: list[tuple[Encoding, bool]]) -> None:
        self._trunk = trunk
        self._parts = parts
        self.work = sum(e.work for e, counted in parts if counted)
        self.left = self.work

    @property
    def divisible(self) -> bool:
        return any(e.divisible for e, counted in self._parts if counted)

    @property
    def done(self) -> bool:
        return all(e.done for e, _ in self._parts)

    def step(self, budget: int) -> int:
        for encoding, counted in self._parts:
            if not counted and not encoding.done:
                encoding.finish()
        work = next((e.step(budget) for e, _ in self._parts if not e.done), 0)
        self.left = sum(e.left for e, counted in self._parts if counted)
        return work

    def result(self) -> Features:
        if not self.done:
            raise self._not_done()
        return self._trunk.combine([e.result() for e, _ in self._parts])


def encode_features(trunk: TrunkBase, texts: Sequence[str]) -> Features:
    """A trunk's vectors, sparse where the trunk is (:meth:`TrunkBase.encode_features`)."""
    return trunk.encode_features(texts)
