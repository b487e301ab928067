"""Every head's first layer stacked into one matrix, applied with one matrix product.

Linear heads contribute their temperature-scaled weights, MLP heads their
hidden layer; one product gives every linear head's logits and every MLP
head's hidden pre-activations at once. MLP heads then finish with their own
small output layer.

This module needs numpy only: a bundle answers from its stored head records
(JSON + tensors) without building scikit-learn estimators, and the ONNX export
lays the same matrices into its graph.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from .record import KINDS, check_record

__all__ = [
    "KINDS",
    "SCORES",
    "FusedHeads",
    "HeadSpec",
    "check_scores",
    "decode",
    "spec_from_record",
    "trim_scores",
]

SCORES = ("all", "top", "none")
TOP_SCORES = 5


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow warnings."""
    return np.exp(-np.logaddexp(0, -z))


@dataclass(frozen=True)
class HeadSpec:
    """A head as the fused product needs it (built from its stored record).

    ``W1``/``b1``: the head's columns of the first layer (linear heads: weights
    already divided by the temperature). ``W2``/``b2``: an MLP head's output
    layer (divided by the temperature), ``None`` for linear heads.
    """

    type: str
    kind: str
    labels: list[Any]
    thresholds: np.ndarray | None
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray | None
    b2: np.ndarray | None
    digest: str

    @property
    def n_outputs(self) -> int:
        return int((self.W2 if self.W2 is not None else self.W1).shape[1])


def _tensor(tensors: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    try:
        arr = np.asarray(tensors[name], dtype=np.float32)
    except KeyError:
        raise DataError(f"head weights lack the tensor {name!r}") from None
    if not np.isfinite(arr).all():
        raise DataError(f"head tensor {name!r} holds non-finite values")
    return arr


def record_digest(record: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> str:
    """Hash of what a head computes: its type, kind, labels, temperature, thresholds, weights."""
    h = hashlib.sha256()
    keys = ("type", "kind", "labels", "temperature", "thresholds")
    h.update(json.dumps([record.get(k) for k in keys], default=str).encode())
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        h.update(name.encode())
        h.update(repr(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def spec_from_record(record: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> HeadSpec:
    """Check a stored head record (:func:`~manyheads.heads.record.check_record`) and its
    tensors and turn them into a :class:`HeadSpec`."""
    checked = check_record(record)
    htype, kind, labels = checked.type, checked.kind, checked.labels
    n_out, thresholds, temperature = checked.n_outputs, checked.thresholds, checked.temperature
    t = np.float32(temperature)
    if htype == "linear":
        coef, intercept = _tensor(tensors, "coef"), _tensor(tensors, "intercept")
        if coef.ndim != 2 or coef.shape[0] != n_out or intercept.shape != (n_out,):
            raise DataError(
                f"head weights have shape {coef.shape} / {intercept.shape}; expected "
                f"({n_out}, d) / ({n_out},) for a {kind} head with {len(labels)} labels"
            )
        W1, b1, W2, b2 = coef.T / t, intercept / t, None, None
    else:
        W1, b1 = _tensor(tensors, "W1"), _tensor(tensors, "b1")
        W2, b2 = _tensor(tensors, "W2"), _tensor(tensors, "b2")
        h = W1.shape[1] if W1.ndim == 2 else -1
        if W1.ndim != 2 or b1.shape != (h,) or W2.shape != (h, n_out) or b2.shape != (n_out,):
            raise DataError(
                f"MLP head weights have shapes W1 {W1.shape}, b1 {b1.shape}, W2 {W2.shape}, "
                f"b2 {b2.shape}; expected (d, h), (h,), (h, {n_out}), ({n_out},) for a {kind} "
                f"head with {len(labels)} labels"
            )
        W2, b2 = W2 / t, b2 / t
    for array in (W1, b1, W2, b2):
        if array is not None and not np.isfinite(array).all():
            raise DataError(f"head weights divided by its temperature {temperature:g} overflow")
    return HeadSpec(
        type=htype,
        kind=kind,
        labels=list(labels),
        thresholds=thresholds,
        W1=np.ascontiguousarray(W1, dtype=np.float32),
        b1=np.asarray(b1, dtype=np.float32),
        W2=None if W2 is None else np.ascontiguousarray(W2, dtype=np.float32),
        b2=None if b2 is None else np.asarray(b2, dtype=np.float32),
        digest=record_digest(record, tensors),
    )


def activate(kind: str, z: np.ndarray) -> np.ndarray:
    """Probabilities from temperature-scaled logits: softmax, or sigmoid per output;
    binary heads give two columns ``[1 - p, p]``."""
    if kind == "multiclass":
        return softmax(z)
    p = sigmoid(z)
    if kind == "binary":
        p = p[:, 0]
        return np.stack([1 - p, p], axis=1)
    return p


def decode(spec: HeadSpec, proba: np.ndarray) -> list[dict[str, Any]]:
    """Answers of one head from its probabilities (the shape ``Bundle.predict`` documents)."""
    labels = spec.labels
    rounded = np.round(proba.astype(np.float64), 6).tolist()
    if spec.kind == "multilabel":
        on = (proba >= spec.thresholds).tolist()
        return [
            {
                "labels": [lab for lab, hit in zip(labels, hits, strict=True) if hit],
                "scores": dict(zip(labels, ps, strict=True)),
            }
            for hits, ps in zip(on, rounded, strict=True)
        ]
    if spec.kind == "binary":
        assert spec.thresholds is not None
        positive = (proba[:, 1] >= spec.thresholds[0]).astype(int).tolist()
    else:
        positive = np.argmax(proba, axis=1).tolist()
    return [
        {"label": labels[k], "score": ps[k], "scores": dict(zip(labels, ps, strict=True))}
        for k, ps in zip(positive, rounded, strict=True)
    ]


def check_scores(scores: Any) -> str:
    """Refuse (one line) a ``scores`` choice other than all, top and none."""
    if scores not in SCORES:
        raise ConfigError(f"scores must be one of {', '.join(SCORES)}, got {scores!r}")
    return str(scores)


def trim_scores(answer: Mapping[str, Any], scores: str) -> dict[str, Any]:
    """One text's answers (``{head: answer}``) with their ``scores`` kept whole (``all``),
    cut to the best five classes, highest first (``top``), or left out (``none``; a
    single-label head keeps its ``score``)."""
    check_scores(scores)
    if scores == "all":
        return dict(answer)
    out: dict[str, Any] = {}
    for name, one in answer.items():
        kept = {k: v for k, v in one.items() if k != "scores"}
        if scores == "top":
            best = sorted(one.get("scores", {}).items(), key=lambda kv: -kv[1])
            kept["scores"] = dict(best[:TOP_SCORES])
        out[name] = kept
    return out


class FusedHeads:
    """One GEMM for every head's first layer, then per-head activation and decoding.

    ``W`` is ``(d, total)``: each linear head's ``coef_`` rows divided by its
    temperature, and each MLP head's hidden layer, laid side by side; ``slices``
    says which columns belong to which head.

    Build it from fitted heads (``FusedHeads({"topic": head, ...})``) or from
    stored records (:meth:`from_records`, numpy only).
    """

    def __init__(self, heads: Mapping[str, Any]) -> None:
        from . import any_head_to_record

        self._setup({n: spec_from_record(*any_head_to_record(h)) for n, h in heads.items()})

    @classmethod
    def from_records(
        cls,
        records: Mapping[str, tuple[Mapping[str, Any], Mapping[str, np.ndarray]]],
        known: Mapping[str, HeadSpec] | None = None,
    ) -> FusedHeads:
        """From ``{name: (record, tensors)}`` as a bundle stores them (checks every shape).

        ``known``: specs already built from the same records (reused, not rebuilt).
        """
        self = cls.__new__(cls)
        specs = {}
        for name, (record, tensors) in records.items():
            if known is not None and name in known:
                specs[name] = known[name]
                continue
            try:
                specs[name] = spec_from_record(record, tensors)
            except DataError as exc:
                raise DataError(f"head {name!r}: {exc}") from None
        self._setup(specs)
        return self

    def _setup(self, specs: dict[str, HeadSpec]) -> None:
        if not specs:
            raise ValueError("FusedHeads needs at least one head")
        dims = {s.W1.shape[0] for s in specs.values()}
        if len(dims) != 1:
            raise DataError(f"heads disagree on the embedding width: {sorted(dims)}")
        self.dim = dims.pop()
        self.names = list(specs)
        self.specs = specs
        self.slices: dict[str, slice] = {}
        col = 0
        for name, s in specs.items():
            self.slices[name] = slice(col, col + s.W1.shape[1])
            col += s.W1.shape[1]
        self.W = np.ascontiguousarray(np.concatenate([s.W1 for s in specs.values()], axis=1))
        self.b = np.concatenate([s.b1 for s in specs.values()]).astype(np.float32)
        self._subsets: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, dict[str, slice]]] = {}

    def _subset(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, slice]]:
        key = tuple(names)
        if key == tuple(self.names):
            return self.W, self.b, self.slices
        if key not in self._subsets:
            cols = np.concatenate([np.arange(self.W.shape[1])[self.slices[n]] for n in key])
            slices, col = {}, 0
            for n in key:
                k = self.slices[n].stop - self.slices[n].start
                slices[n] = slice(col, col + k)
                col += k
            self._subsets[key] = (np.ascontiguousarray(self.W[:, cols]), self.b[cols], slices)
        return self._subsets[key]

    def probabilities(self, X: Any, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """``{head: probabilities}`` computed with a single matrix product.

        ``X`` is a dense array or a SciPy sparse matrix of width ``dim``.
        """
        names = list(self.names if names is None else names)
        unknown = [n for n in names if n not in self.specs]
        if unknown:
            raise DataError(f"unknown head {unknown[0]!r}; known: {', '.join(self.names)}")
        if X.shape[1] != self.dim:
            raise DataError(f"X has {X.shape[1]} features but the heads expect {self.dim}")
        W, b, slices = self._subset(names)
        X = X.astype(np.float32) if hasattr(X, "tocsr") else np.asarray(X, dtype=np.float32)
        Z = np.asarray(X @ W)
        Z += b
        out: dict[str, np.ndarray] = {}
        for n in names:
            spec, z = self.specs[n], Z[:, slices[n]]
            if spec.W2 is not None:  # an MLP head: ReLU, then its output layer
                z = np.maximum(z, 0) @ spec.W2 + spec.b2
            out[n] = activate(spec.kind, z)
        return out

    def predict(self, X: Any, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Per text, ``{head: answer}`` in the shape documented on ``Bundle.predict``."""
        names = list(self.names if names is None else names)
        return self.answers(self.probabilities(X, names), names)

    def answers(
        self, probs: Mapping[str, np.ndarray], names: Sequence[str]
    ) -> list[dict[str, Any]]:
        """Per text, ``{head: answer}`` from per-head probabilities."""
        n_rows = len(next(iter(probs.values()))) if probs else 0
        results: list[dict[str, Any]] = [{} for _ in range(n_rows)]
        for n in names:
            for row, answer in zip(results, self.decode(n, probs[n]), strict=True):
                row[n] = answer
        return results

    def decode(self, name: str, proba: np.ndarray) -> list[dict[str, Any]]:
        return decode(self.specs[name], proba)
