"""Growing and training a tree head (:mod:`~manyheads.heads.tree`) on cached vectors.

The tree is grown top-down from the labels' embeddings (the normalised mean of their
training rows' vectors): k-means splits a node's labels into ``branching`` groups
until a group holds at most ``leaf_size`` labels (the choice against co-occurrence
and names is measured in ``bench/RESULTS.md``). Each inner node then learns an
L2-regularised logistic regression over its children on the rows whose labels lie
below it (:mod:`~manyheads.heads.solver`): a softmax for a multiclass head, a
sigmoid per child for a multilabel one (a probabilistic label tree). Every row takes
part in one regression per level, so training grows with rows x depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, DataError
from ..trunks.base import dense_rows
from .kind import Reading
from .kinds import PATH_SEP, kind_of
from .record import check_record
from .solver import fit_sigmoid, fit_softmax
from .tree import (
    INT4_GROUP,
    KEEP,
    PRECISIONS,
    ROUTES,
    TREES_EXPECTED,
    LabelTree,
    forest_of,
    forest_tensors,
    pack_int4,
    roots,
    search,
    search_params,
    tree_count,
    trees_ok,
)

__all__ = ["TreeHead", "tree_head_from_record", "tree_head_to_record"]

_NODE_ITER = 200  # L-BFGS steps of one node's regression
# node fits are not whitened (solver.py): a factorisation for each of thousands of nodes,
# most of a few rows, costs more than the steps it saves


class TreeHead:
    """A label tree head: multiclass or multilabel, 10^4 to 10^6 labels.

    ``beam``: inner nodes of each level a text's search keeps; ``leaf_size``: labels
    under a node that is not split further; ``branching``: the groups a node's labels
    are split into; ``C``: the nodes' regularisation, as a dense ``LinearHead``'s over
    all rows (each node's is scaled to the rows it sees; ``"auto"`` is 1);
    ``precision``: how the weights are stored, ``float16``, ``int8`` (a scale per row)
    or ``int4`` (two weights a byte, a scale per 32 weights; vectors of a width that is
    a multiple of 32); ``trees``: trees grown from differently seeded k-means, a
    label's probability the mean of theirs (each tree costs its memory and its search
    again; ``"auto"``: two up to :data:`~manyheads.heads.tree.TWO_TREES_UP_TO` labels,
    one above)."""

    extreme = True

    def __init__(
        self,
        kind: str = "multiclass",
        path_sep: str = PATH_SEP,
        class_weight: Any = None,
        thresholds: str = "f1",
        C: float | str = 1.0,
        beam: int = 10,
        leaf_size: int = 200,
        branching: int = 64,
        precision: str = "float16",
        trees: int | str = "auto",
        random_state: int = 0,
    ) -> None:
        self.kind = kind
        self.path_sep = path_sep
        self.class_weight = class_weight
        self.thresholds = thresholds
        self.C = C
        self.beam = beam
        self.leaf_size = leaf_size
        self.branching = branching
        self.precision = precision
        self.trees = trees
        self.random_state = random_state

    # -- what every head has --------------------------------------------------

    @property
    def head_kind(self) -> Any:
        return kind_of(self.kind)

    @property
    def parents_(self) -> None:
        return None

    @property
    def fitted(self) -> bool:
        return hasattr(self, "trees_")

    def check_params(self) -> None:
        if self.kind not in ("multiclass", "multilabel"):
            raise ConfigError(f"a tree head is multiclass or multilabel, not {self.kind!r}")
        if self.class_weight is not None:
            raise ConfigError("a tree head takes no class_weight")
        if self.C != "auto" and (isinstance(self.C, str | bool) or not float(self.C) > 0):
            raise ConfigError(f"a tree head takes a positive number as C, got {self.C!r}")
        for name, low in (("beam", 1), ("leaf_size", 2), ("branching", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if not trees_ok(self.trees):
            raise ConfigError(f"trees must be {TREES_EXPECTED}, got {self.trees!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )

    # -- training ---------------------------------------------------------------

    def fit(
        self,
        X: Any,
        y: Sequence[Any],
        X_val: Any = None,
        y_val: Sequence[Any] | None = None,
        *,
        label_vectors: np.ndarray | None = None,
        **_: Any,
    ) -> TreeHead:
        """Grow the tree on ``X`` / ``y`` and train its nodes; a multilabel head's one
        threshold is chosen on ``X_val`` / ``y_val`` (F1 over the labels of each row).
        ``label_vectors``: one vector per label, in the order of the sorted labels (e.g.
        the trunk's vectors of their names), to grow the tree from instead of the
        labels' rows."""
        self.check_params()
        if sp.issparse(X):
            raise DataError("a tree head learns from dense vectors; this trunk gives sparse ones")
        X = np.ascontiguousarray(X, dtype=np.float32)
        labels = list(y)
        if X.ndim != 2 or X.shape[0] != len(labels):
            raise DataError(f"X has {X.shape[0]} rows but y has {len(labels)} labels")
        if self.precision == "int4" and X.shape[1] % INT4_GROUP:
            raise ConfigError(
                f"precision int4 scales each {INT4_GROUP} weights of a row and needs vectors "
                f"whose width is a multiple of {INT4_GROUP}; these are {X.shape[1]} wide "
                "(use int8)"
            )
        kind = self.head_kind
        present = np.ones(len(labels), dtype=bool)
        self.classes_ = np.asarray(kind.learn_classes(labels, Reading(present, self.path_sep)))
        Y = indicator(self.kind, labels, self.classes_.tolist())
        keep = np.flatnonzero(np.diff(Y.indptr))
        X, Y = X[keep], Y[keep]
        if not len(keep):
            raise DataError("no training row has a label")
        if label_vectors is not None:
            E = np.asarray(label_vectors, dtype=np.float32)
            if E.shape != (len(self.classes_), X.shape[1]):
                raise DataError(
                    f"label_vectors must be one {X.shape[1]}-d row per label "
                    f"({len(self.classes_)}), got shape {E.shape}"
                )
            E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
        else:
            E = _label_embeddings(X, Y)
        self.trees_ = tuple(
            self._train(X, Y, grow(E, self.leaf_size, self.branching, self.random_state + t))
            for t in range(tree_count(self.trees, len(self.classes_)))
        )
        self.temperature_ = 1.0
        self.threshold_ = 0.5
        self.route_ = 1.0
        self.n_features_in_ = X.shape[1]
        if X_val is not None and y_val:
            X_val = np.asarray(X_val, dtype=np.float32)
            self.route_ = self._tune_route(X_val, y_val)
            if not kind.exclusive:
                self.threshold_ = self._tune_threshold(X_val, y_val)
        return self

    def _tune_route(self, X_val: np.ndarray, y_val: Sequence[Any]) -> float:
        """The weight of the path (:data:`~manyheads.heads.tree.ROUTES`) whose best
        label is most often right on the validation rows (ties: the larger)."""
        truth = indicator(self.kind, list(y_val), self.classes_.tolist())
        best, best_p1 = 1.0, -1.0
        for route in sorted(ROUTES, reverse=True):
            self.route_ = route
            top = np.asarray(self.predict_proba(X_val).argmax(axis=1)).ravel()
            p1 = float(truth[np.arange(len(top)), top].mean())
            if p1 > best_p1:
                best, best_p1 = route, p1
        return best

    def _train(self, X: np.ndarray, Y: sp.csr_matrix, children: list[np.ndarray]) -> LabelTree:
        n_inner = len(children)
        start = np.zeros(n_inner + 1, dtype=np.int64)
        start[1:] = np.cumsum([len(c) for c in children])
        flat = np.concatenate(children).astype(np.int64)
        parent = np.zeros(n_inner + Y.shape[1], dtype=np.int64)
        pos = np.zeros_like(parent)
        owner = np.repeat(np.arange(n_inner), np.diff(start))
        parent[flat] = owner
        pos[flat] = np.arange(len(flat)) - start[owner]
        # (node, row, child position) for every node above each of a row's labels
        Yc = Y.tocoo()
        row, cur = Yc.row.astype(np.int64), Yc.col.astype(np.int64) + n_inner
        nodes, rows, at = [], [], []
        while len(cur):
            u = parent[cur]
            nodes.append(u)
            rows.append(row)
            at.append(pos[cur])
            up = u != 0
            row, cur = row[up], u[up]
        node, row, p = np.concatenate(nodes), np.concatenate(rows), np.concatenate(at)
        order = np.lexsort((p, row, node))
        node, row, p = node[order], row[order], p[order]
        weights = np.zeros((len(flat), X.shape[1]), dtype=np.float32)
        bias = np.zeros(len(flat), dtype=np.float32)
        cuts = np.searchsorted(node, np.arange(n_inner + 1))
        C = 1.0 if self.C == "auto" else float(self.C)  # "auto": each node's C is scaled
        for u in range(n_inner):
            lo, hi = cuts[u], cuts[u + 1]
            a, b = int(start[u]), int(start[u + 1])
            if b - a == 1:
                continue  # one child: certain
            r, q = row[lo:hi], p[lo:hi]
            # the penalty a dense head puts on these weights: C over all rows, not these
            Cu = C * len(X) / max(len(np.unique(r)), 1)
            if self.head_kind.exclusive:
                fit = fit_softmax(X[r], q, b - a, C=Cu, max_iter=_NODE_ITER, whiten=False)
            else:
                urows, inverse = np.unique(r, return_inverse=True)
                T = np.zeros((len(urows), b - a), dtype=np.float32)
                T[inverse, q] = 1.0
                if (T.sum(axis=0) == len(urows)).all():
                    bias[a:b] = 10.0  # every row has every child
                    continue
                fit = fit_sigmoid(X[urows], T, C=Cu, max_iter=_NODE_ITER, whiten=False)
            weights[a:b] = fit.coef
            bias[a:b] = fit.intercept
        return quantised(start, flat, weights, bias, self.head_kind.exclusive, self.precision)

    def _tune_threshold(self, X_val: np.ndarray, y_val: Sequence[Any]) -> float:
        proba = self.predict_proba(X_val)
        truth = indicator(self.kind, list(y_val), self.classes_.tolist())
        best, best_f1 = 0.5, -1.0
        for t in np.round(np.arange(0.05, 0.96, 0.05), 2):
            picked = (proba >= t).astype(np.float32)
            tp = picked.multiply(truth).sum()
            f1 = 2 * tp / max(picked.sum() + truth.sum(), 1)
            if f1 > best_f1:
                best, best_f1 = float(t), float(f1)
        return best

    # -- answers -----------------------------------------------------------------

    def predict_proba(self, X: Any) -> sp.csr_matrix:
        """Each row's best labels (at most ``KEEP``) with their probabilities."""
        X = dense_rows(X)
        W, b = roots(self.trees_)
        return search(self.trees_, X, X @ W + b, self.beam, KEEP, self.route_)

    def nbytes(self) -> int:
        """The bytes of the head's trees."""
        return sum(tree.nbytes() for tree in self.trees_)

    @property
    def thresholds_(self) -> np.ndarray | None:
        if self.head_kind.exclusive:
            return None
        return np.full(len(self.classes_), self.threshold_, dtype=np.float32)


def indicator(kind: str, labels: list[Any], classes: list[Any]) -> sp.csr_matrix:
    """Rows x classes 0/1 (sparse) of ``labels``; labels outside ``classes`` left out."""
    index = {c: i for i, c in enumerate(classes)}
    found: Any = kind_of(kind)
    sets = [[v] for v in labels] if found.exclusive else found.sets(labels, Reading(
        np.ones(len(labels), dtype=bool)))  # fmt: skip
    indptr, cols = [0], []
    for labs in sets:
        cols.extend(sorted({index[v] for v in labs if v in index}))
        indptr.append(len(cols))
    data = np.ones(len(cols), dtype=np.float32)
    return sp.csr_matrix((data, cols, indptr), shape=(len(sets), len(classes)))


def _label_embeddings(X: np.ndarray, Y: sp.csr_matrix) -> np.ndarray:
    """Each label's normalised mean of its rows' normalised vectors."""
    Xn = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    E = np.asarray(Y.T @ Xn, dtype=np.float32)
    return E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)


def grow(E: np.ndarray, leaf_size: int, branching: int, seed: int) -> list[np.ndarray]:
    """A label tree over the rows of ``E`` (label embeddings), top-down by k-means:
    each inner node's children as node ids (inner nodes numbered breadth-first from
    the root, 0; label ``j`` is node ``n_inner + j``)."""
    from sklearn.cluster import KMeans, MiniBatchKMeans

    n_labels = len(E)
    groups: list[np.ndarray] = [np.arange(n_labels)]
    kids: list[list[tuple[bool, int]]] = []  # (inner?, inner index or label)
    i = 0
    while i < len(groups):
        members = groups[i]
        i += 1
        if len(members) <= leaf_size:
            kids.append([(False, int(j)) for j in members])
            continue
        k = min(branching, math.ceil(len(members) / leaf_size))
        sub = E[members]
        maker = KMeans if len(members) <= 50_000 else MiniBatchKMeans
        found = maker(n_clusters=k, n_init=1, max_iter=20, random_state=seed).fit_predict(sub)
        parts = [members[found == c] for c in range(k)]
        parts = [p for p in parts if len(p)]
        if len(parts) < 2:  # k-means could not tell them apart: split along a direction
            along = sub @ np.random.default_rng(seed).standard_normal(sub.shape[1])
            parts = np.array_split(members[np.argsort(along, kind="stable")], k)
        node: list[tuple[bool, int]] = []
        for part in parts:
            if len(part) == 1:
                node.append((False, int(part[0])))
            else:
                node.append((True, len(groups)))
                groups.append(part)
        kids.append(node)
    n_inner = len(kids)
    return [
        np.array([c if inner else n_inner + c for inner, c in node], dtype=np.int64)
        for node in kids
    ]


def quantised(
    start: np.ndarray,
    children: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray,
    exclusive: bool,
    precision: str,
) -> LabelTree:
    """The tree with its weights stored in ``precision`` (int8: a symmetric scale per
    row; int4: packed two weights a byte, a symmetric scale per ``INT4_GROUP`` weights
    of a row)."""
    if precision == "int8":
        scale = np.abs(weights).max(axis=1) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.rint(weights / scale[:, None]), -127, 127).astype(np.int8)
        return LabelTree(start, children, q, scale.astype(np.float32), bias, exclusive)
    if precision == "int4":  # a width that is a multiple of INT4_GROUP: checked by fit
        n, d = weights.shape
        grouped = weights.reshape(n, d // INT4_GROUP, INT4_GROUP)
        scale = np.abs(grouped).max(axis=2) / 7.0
        scale[scale == 0] = 1.0
        q = np.clip(np.rint(grouped / scale[:, :, None]), -7, 7).astype(np.int8)
        packed = pack_int4(q.reshape(n, d))
        return LabelTree(start, children, packed, scale.astype(np.float32), bias, exclusive)
    w16 = np.clip(weights, -65_000, 65_000).astype(np.float16)
    return LabelTree(start, children, w16, None, bias.astype(np.float32), exclusive)


def tree_head_to_record(head: TreeHead) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON-ready record of a fitted tree head and its tensors."""
    if not head.fitted:
        raise DataError("this TreeHead is not fitted yet")
    record = {
        "type": "tree",
        "kind": head.kind,
        "labels": head.classes_.tolist(),
        "temperature": 1.0,
        "params": {
            "C": head.C if head.C == "auto" else float(head.C),
            "beam": int(head.beam),
            "leaf_size": int(head.leaf_size),
            "branching": int(head.branching),
            "precision": head.precision,
            "trees": len(head.trees_),
            "threshold": float(head.threshold_),
            "route": float(head.route_),
        },
    }
    return record, forest_tensors(head.trees_)


def tree_head_from_record(record: dict[str, Any], tensors: dict[str, np.ndarray]) -> TreeHead:
    """A fitted tree head from its record; every field checked."""
    checked = check_record(record, tensors)
    if checked.type != "tree":
        raise DataError(f"head record has type {checked.type!r}, expected 'tree'")
    params = checked.params
    trees = forest_of(checked.tensors, checked.kind.exclusive)
    _, route, threshold = search_params(params, len(trees))
    head = TreeHead(
        kind=checked.kind.name,
        trees=len(trees),
        **{
            k: params[k]
            for k in ("C", "beam", "leaf_size", "branching", "precision")
            if k in params
        },
    )
    try:
        head.check_params()
    except ConfigError as exc:
        raise DataError(f"tree head record has a bad parameter: {exc}") from None
    head.classes_ = np.asarray(checked.labels)
    head.trees_ = trees
    head.temperature_ = 1.0
    head.threshold_ = threshold
    head.route_ = route
    head.n_features_in_ = head.trees_[0].dim
    return head
