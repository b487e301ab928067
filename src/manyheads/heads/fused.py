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
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from ..trunks.base import dense_rows
from .decode import SCORES, Scores, answers, check_scores
from .head_types import head_type
from .kinds import KINDS, Kind
from .record import check_record
from .tree import KEEP, LabelTree, search, search_params

__all__ = [
    "KINDS",
    "SCORES",
    "FusedHeads",
    "HeadSpec",
    "check_scores",
    "spec_from_record",
]


_BLOCK = 256  # rows of a sparse X per product


def product(X: Any, W: np.ndarray) -> np.ndarray:
    """``X @ W`` (float32). A sparse ``X`` (SciPy CSR, wide and thin: n-gram parts) is
    multiplied a block of rows at a time, each block column-major (CSC reads each row
    of ``W`` once per block rather than once per text that has it: ~5x fewer memory
    reads), the blocks on a thread pool (SciPy's products release the GIL)."""
    if not hasattr(X, "tocsc"):  # dense: numpy's BLAS uses every core already
        return np.asarray(np.asarray(X, dtype=np.float32) @ W)
    X = X.astype(np.float32)
    n = X.shape[0]
    if n <= _BLOCK:
        return np.asarray(X.tocsc() @ W)

    def block(start: int) -> np.ndarray:
        return np.asarray(X[start : start + _BLOCK].tocsc() @ W)

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        return np.vstack(list(pool.map(block, range(0, n, _BLOCK))))


@dataclass(frozen=True)
class HeadSpec:
    """A head as the fused product needs it (built from its stored record).

    ``W1``/``b1``: the head's columns of the first layer (linear heads: weights
    already divided by the temperature). ``W2``/``b2``: an MLP head's output
    layer (divided by the temperature), ``None`` for linear heads.
    """

    type: str
    kind: Kind
    labels: list[Any]
    thresholds: np.ndarray | None
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray | None
    b2: np.ndarray | None
    digest: str
    parents: np.ndarray | None = None  # hierarchical: each label's parent (-1: a root)
    trees: tuple[LabelTree, ...] = ()  # a tree head's label trees (W1/b1: their roots' columns)
    beam: int = 0  # a tree head's beam
    route: float = 1.0  # a tree head's weight of its path

    @property
    def n_outputs(self) -> int:
        return int((self.W2 if self.W2 is not None else self.W1).shape[1])


def record_digest(record: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> str:
    """Hash of what a head computes: its type, kind, labels, temperature, thresholds, weights."""
    h = hashlib.sha256()
    keys = ("type", "kind", "labels", "temperature", "thresholds")
    fields = [record.get(k) for k in keys]
    if record.get("path_sep") is not None:  # hierarchical heads only: older digests stay
        fields.append(record["path_sep"])
    h.update(json.dumps(fields, default=str).encode())
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        # float32 as ever; a tree head's integer and float16 / int8 tensors as they are
        keep = arr.dtype in (np.float16, np.int8, np.int64)
        arr = np.ascontiguousarray(arr, dtype=None if keep else np.float32)
        h.update(name.encode())
        h.update(repr(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def spec_from_record(record: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> HeadSpec:
    """A stored head record and its tensors, checked
    (:func:`~manyheads.heads.record.check_record`), as the fused product needs them."""
    checked = check_record(record, tensors)
    htype = head_type(checked.type)
    W1, b1, W2, b2 = htype.layers(checked.tensors, checked.temperature)
    temperature = checked.temperature
    for array in (W1, b1, W2, b2):
        if array is not None and not np.isfinite(array).all():
            raise DataError(f"head weights divided by its temperature {temperature:g} overflow")
    thresholds = checked.thresholds
    trees = htype.trees(checked.kind.name, checked.tensors)
    beam, route, threshold = (
        search_params(checked.params, len(trees)) if htype.extreme else (0, 1.0, 0.5)
    )
    if htype.extreme and thresholds is not None:  # one threshold for every label
        thresholds = np.full(len(thresholds), threshold, np.float32)
    return HeadSpec(
        type=checked.type,
        kind=checked.kind,
        labels=list(checked.labels),
        thresholds=thresholds,
        W1=np.ascontiguousarray(W1, dtype=np.float32),
        b1=np.asarray(b1, dtype=np.float32),
        W2=None if W2 is None else np.ascontiguousarray(W2, dtype=np.float32),
        b2=None if b2 is None else np.asarray(b2, dtype=np.float32),
        digest=record_digest(record, tensors),
        parents=checked.kind.parents(checked.labels, checked.path_sep),
        trees=trees,
        beam=beam,
        route=route,
    )


class FusedHeads:
    """One GEMM for every head's first layer, then per-head activation and decoding.

    ``W`` is ``(d, total)``: each linear head's ``coef_`` rows divided by its
    temperature, and each MLP head's hidden layer, laid side by side; ``slices``
    says which columns belong to which head.

    Build it from fitted heads (``FusedHeads({"topic": head, ...})``) or from
    stored records (:meth:`from_records`, numpy only).
    """

    def __init__(self, heads: Mapping[str, Any]) -> None:
        from .convert import any_head_to_record

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
        W, b, _ = self._subset(names)
        Z = product(X, W)
        Z += b
        return self.from_first_layer(Z, names, X)

    def dense_only(self) -> FusedHeads | None:
        """These heads without the tree heads (what an ONNX graph holds: the beam search
        runs in numpy on the graph's vector); None when every head is a tree."""
        kept = {n: s for n, s in self.specs.items() if not s.trees}
        if len(kept) == len(self.specs):
            return self
        if not kept:
            return None
        out = FusedHeads.__new__(FusedHeads)
        out._setup(kept)
        return out

    def searches(self, names: Sequence[str]) -> bool:
        """Whether a head of ``names`` searches a label tree (it needs the vectors, not
        only the first layer's product)."""
        return any(self.specs[n].trees for n in names)

    def first_layer(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)``: the first layer of the heads ``names``, side by side (a trunk that
        runs on a GPU computes ``X @ W + b`` there, :meth:`from_first_layer` the rest)."""
        W, b, _ = self._subset(list(names))
        return W, b

    def from_first_layer(
        self, Z: np.ndarray, names: Sequence[str], X: Any = None
    ) -> dict[str, np.ndarray]:
        """``{head: probabilities}`` from ``Z = X @ W + b`` of :meth:`first_layer` (a
        tree head's are a sparse matrix of each text's best labels, searched from ``X``:
        :meth:`searches`)."""
        names = list(names)
        _, _, slices = self._subset(names)
        out: dict[str, Any] = {}
        for n in names:
            spec, z = self.specs[n], Z[:, slices[n]]
            if spec.trees:
                if X is None:
                    raise DataError(f"head {n!r} searches a label tree: it needs the vectors")
                out[n] = search(spec.trees, dense_rows(X), z, spec.beam, KEEP, spec.route)
                continue
            if spec.W2 is not None:  # an MLP head: ReLU, then its output layer
                z = np.maximum(z, 0) @ spec.W2 + spec.b2
            out[n] = spec.kind.activate(z)
        return out

    def predict(self, X: Any, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Per text, ``{head: answer}`` in the shape documented on ``Bundle.predict``."""
        names = list(self.names if names is None else names)
        return self.answers(self.probabilities(X, names), names)

    def answers(
        self, probs: Mapping[str, Any], names: Sequence[str], scores: Scores = "all"
    ) -> list[dict[str, Any]]:
        """Per text, ``{head: answer}`` from per-head probabilities (``scores``: which
        class scores an answer keeps, see :func:`~manyheads.heads.decode.answers`)."""
        n_rows = next(iter(probs.values())).shape[0] if probs else 0
        results: list[dict[str, Any]] = [{} for _ in range(n_rows)]
        for n in names:
            for row, answer in zip(results, self.decode(n, probs[n], scores), strict=True):
                row[n] = answer
        return results

    def decode(self, name: str, proba: Any, scores: Scores = "all") -> list[dict[str, Any]]:
        spec = self.specs[name]
        return answers(spec.kind, spec.labels, spec.thresholds, proba, scores, spec.parents)
