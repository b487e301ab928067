"""Head types: what a stored head is besides its kind (``record["type"]``): the tensors
its record holds and how they are checked, the columns it lays into the one fused
product, what it can learn from, and how one is made, stored and rebuilt.

A new head type is one module (its estimator and its :class:`HeadType`) plus one line
in :data:`HEAD_TYPE_REGISTRY` (or a call of :func:`register_head_type`). This module
needs numpy only: a bundle checks and answers its heads without scikit-learn or torch;
the estimators are imported when a head is made or rebuilt.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import DataError

__all__ = [
    "EXTREME_LABELS",
    "HEAD_TYPE_REGISTRY",
    "HeadType",
    "LinearType",
    "MLPType",
    "TreeType",
    "candidate_types",
    "head_type",
    "register_head_type",
    "tensor",
]

Layers = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


def tensor(tensors: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """The tensor ``name`` of a head's record, float32 and finite; one line else."""
    try:
        arr = np.asarray(tensors[name], dtype=np.float32)
    except KeyError:
        raise DataError(f"head weights lack the tensor {name!r}") from None
    if not np.isfinite(arr).all():
        raise DataError(f"head tensor {name!r} holds non-finite values")
    return arr


class HeadType:
    """A head type (the class attributes say what it can do; the methods check, lay out,
    make and rebuild its heads)."""

    name: ClassVar[str] = ""
    estimator: ClassVar[str] = ""
    """``module:Class`` of its estimator in this package (imported on first use)."""
    to_record_fn: ClassVar[str] = ""
    from_record_fn: ClassVar[str] = ""
    takes_sparse: ClassVar[bool] = False
    """Fits and answers on sparse (CSR) vectors as they are."""
    weighs_parts: ClassVar[bool] = False
    """Its weights over a composite trunk's parts can be chosen on validation rows."""
    learns_soft_targets: ClassVar[bool] = False
    """Learns from a teacher's probabilities (``soft_targets``)."""
    extreme: ClassVar[bool] = False
    """Answers a text's best labels only (a sparse row of probabilities), for label
    spaces too large for a dense matrix (:mod:`manyheads.heads.tree`)."""

    def check_tensors(
        self, kind: str, n_labels: int, n_out: int, tensors: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Its record's tensors, float32, finite, of shapes that fit together and with
        its ``n_labels`` labels (``n_out`` outputs); one line else."""
        raise NotImplementedError

    def layers(self, tensors: Mapping[str, np.ndarray], temperature: float) -> Layers:
        """``(W1, b1, W2, b2)``: its columns of the fused first layer and (an MLP) its
        own output layer, the temperature divided in (``W2``/``b2`` None: none)."""
        raise NotImplementedError

    def trees(self, kind: str, tensors: Mapping[str, np.ndarray]) -> tuple[Any, ...]:
        """An extreme type's searched trees (:mod:`manyheads.heads.tree`); none else."""
        return ()

    def _attr(self, ref: str) -> Any:
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)

    def estimator_class(self) -> type:
        cls: type = self._attr(self.estimator)
        return cls

    def new(self, kind: str, settings: Any) -> Any:
        """An unfitted head of this type for ``kind`` with a fit's ``settings``."""
        return self.estimator_class()(
            kind=kind,
            path_sep=settings.path_sep,
            class_weight=settings.class_weight,
            thresholds=settings.thresholds,
            **self.own_settings(settings),
        )

    def own_settings(self, settings: Any) -> dict[str, Any]:
        """The settings of a fit only this type's estimator takes."""
        return {}

    def kept_settings(self, head: Any) -> dict[str, Any]:
        """The fit settings ``head`` was made with that its type's own and its record
        keeps (an update fits it again with them)."""
        return {}

    def to_record(self, head: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return self._attr(self.to_record_fn)(head)

    def from_record(self, record: dict[str, Any], tensors: dict[str, np.ndarray]) -> Any:
        return self._attr(self.from_record_fn)(record, tensors)


class LinearType(HeadType):
    """A linear head: its weights divided by its temperature are its columns of the
    fused product, the whole head (:mod:`manyheads.heads.linear`)."""

    name = "linear"
    estimator = "linear:LinearHead"
    to_record_fn = "linear:head_to_record"
    from_record_fn = "linear:head_from_record"
    takes_sparse = True
    weighs_parts = True
    learns_soft_targets = True

    def check_tensors(
        self, kind: str, n_labels: int, n_out: int, tensors: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        coef, intercept = tensor(tensors, "coef"), tensor(tensors, "intercept")
        if coef.ndim != 2 or coef.shape[0] != n_out or intercept.shape != (n_out,):
            raise DataError(
                f"head weights have shape {coef.shape} / {intercept.shape}; expected "
                f"({n_out}, d) / ({n_out},) for a {kind} head with {n_labels} labels"
            )
        return {"coef": coef, "intercept": intercept}

    def layers(self, tensors: Mapping[str, np.ndarray], temperature: float) -> Layers:
        t = np.float32(temperature)
        return tensors["coef"].T / t, tensors["intercept"] / t, None, None

    def own_settings(self, settings: Any) -> dict[str, Any]:
        return {"C": settings.C}


class MLPType(HeadType):
    """A head with one hidden layer: its hidden layer is its columns of the fused
    product, its output layer its own (:mod:`manyheads.heads.mlp`)."""

    name = "mlp"
    estimator = "mlp:MLPHead"
    to_record_fn = "mlp:mlp_head_to_record"
    from_record_fn = "mlp:mlp_head_from_record"

    def check_tensors(
        self, kind: str, n_labels: int, n_out: int, tensors: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        W1, b1 = tensor(tensors, "W1"), tensor(tensors, "b1")
        W2, b2 = tensor(tensors, "W2"), tensor(tensors, "b2")
        h = W1.shape[1] if W1.ndim == 2 else -1
        if W1.ndim != 2 or b1.shape != (h,) or W2.shape != (h, n_out) or b2.shape != (n_out,):
            raise DataError(
                f"MLP head weights have shapes W1 {W1.shape}, b1 {b1.shape}, W2 {W2.shape}, "
                f"b2 {b2.shape}; expected (d, h), (h,), (h, {n_out}), ({n_out},) for a {kind} "
                f"head with {n_labels} labels"
            )
        return {"W1": W1, "b1": b1, "W2": W2, "b2": b2}

    def layers(self, tensors: Mapping[str, np.ndarray], temperature: float) -> Layers:
        t = np.float32(temperature)
        return tensors["W1"], tensors["b1"], tensors["W2"] / t, tensors["b2"] / t

    def own_settings(self, settings: Any) -> dict[str, Any]:
        return {"random_state": settings.seed}


# every stored head type by its name (the name is what a record's "type" holds)
HEAD_TYPE_REGISTRY: dict[str, HeadType] = {}


def register_head_type(kind: HeadType) -> HeadType:
    """Add a head type under its name (replacing one of that name); returns it."""
    if not isinstance(kind, HeadType) or not kind.name:
        raise TypeError(f"a head type is a named HeadType, got {kind!r}")
    HEAD_TYPE_REGISTRY[kind.name] = kind
    return kind


class TreeType(HeadType):
    """A label tree: the root's classifier is its columns of the fused product, the rest
    is searched by beam (:func:`beam_search`)."""

    name = "tree"
    estimator = "tree_fit:TreeHead"
    to_record_fn = "tree_fit:tree_head_to_record"
    from_record_fn = "tree_fit:tree_head_from_record"
    extreme = True

    def check_tensors(
        self, kind: str, n_labels: int, n_out: int, tensors: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        if kind not in ("multiclass", "multilabel"):
            raise DataError(f"a tree head is multiclass or multilabel, not {kind}")
        found = self._attr("tree:check_forest")(tensors, n_labels, kind == "multiclass")
        return dict(self._attr("tree:forest_tensors")(found))

    def trees(self, kind: str, tensors: Mapping[str, np.ndarray]) -> tuple[Any, ...]:
        """The trees of a checked record's tensors (:class:`manyheads.heads.tree.LabelTree`;
        a multiclass head's children share a softmax)."""
        found: tuple[Any, ...] = self._attr("tree:forest_of")(tensors, kind == "multiclass")
        return found

    def layers(self, tensors: Mapping[str, np.ndarray], temperature: float) -> Layers:
        W, b = self._attr("tree:roots")(self._attr("tree:forest_of")(tensors, True))
        return W, b, None, None

    def own_settings(self, settings: Any) -> dict[str, Any]:
        return {
            "C": settings.C,
            "beam": settings.beam,
            "precision": settings.precision,
            "trees": settings.trees,
            "random_state": settings.seed,
        }

    def kept_settings(self, head: Any) -> dict[str, Any]:
        return {"beam": head.beam, "precision": head.precision, "trees": head.trees}


for _type in (LinearType(), MLPType(), TreeType()):
    register_head_type(_type)


EXTREME_LABELS = 5_000
"""Above this many labels ``head="auto"`` makes a tree head; at or below, the dense
types compete."""


def candidate_types(head: str, n_labels: int) -> list[str]:
    """The stored types a fit of ``head`` (a type's name, or ``auto``) tries for a head
    of ``n_labels`` labels."""
    if head != "auto":
        return [head]
    extreme = n_labels > EXTREME_LABELS
    return [n for n, t in HEAD_TYPE_REGISTRY.items() if t.extreme == extreme]


def head_type(name: Any) -> HeadType:
    """The stored head type ``name``; an unknown one is refused in one line."""
    found = HEAD_TYPE_REGISTRY.get(name) if isinstance(name, str) else None
    if found is None:
        names = [repr(n) for n in HEAD_TYPE_REGISTRY]
        known = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise DataError(f"unknown head type {name!r}; this version knows {known}")
    return found
