"""The tree head type: a label tree for extreme label spaces (10^4 to 10^6 labels),
searched by beam, so a text's cost grows with the tree's depth, not with its labels.

The labels are the leaves of a tree whose inner nodes each hold a small linear
classifier over their children (:mod:`~manyheads.heads.tree_fit` grows and trains it).
A multiclass head is a hierarchical softmax (a label's probability is the product of
the softmaxes along its path); a multilabel head a probabilistic label tree (the
product of its nodes' sigmoids, as napkinXC and Omikuji). The root's classifier is
the head's columns of the bundle's one fused product; below it, :func:`beam_search`
scores only the children of the ``beam`` best nodes of each level.

A head may hold several trees grown from differently seeded k-means (a forest, as
Parabel and Omikuji build): a label's probability is then the mean of its trees' (0
in a tree whose search did not reach it), :func:`search`. Each tree's root is its own
columns of the fused product; tree ``t >= 1`` stores its tensors as ``tree{t}.<name>``.

An answer holds the head's best ``KEEP`` labels of each text, as a sparse row of
probabilities (``scipy.sparse.csr_matrix``, texts x labels: every label the search did
not reach is 0). The weights are stored in float16 (default), in int8 with one scale
per row, or in int4 (two weights a byte) with one scale per 32 weights of a row. Needs
numpy and scipy only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, DataError
from .head_types import tensor

__all__ = [
    "BYTES_PER_WEIGHT",
    "INT4_GROUP",
    "KEEP",
    "MAX_TREES",
    "PRECISIONS",
    "ROUTES",
    "TREES_EXPECTED",
    "TWO_TREES_UP_TO",
    "LabelTree",
    "beam_search",
    "check_forest",
    "check_top_k",
    "forest_of",
    "forest_tensors",
    "memory_bound",
    "pack_int4",
    "roots",
    "search",
    "search_params",
    "tree_count",
    "trees_ok",
    "unpack_int4",
]

KEEP = 100
"""Labels an answer of a tree head keeps per text (its best, by probability)."""
PRECISIONS = ("float16", "int8", "int4")
INT4_GROUP = 32
"""Weights of a row that share one scale in int4 (a row's width a multiple of it)."""
BYTES_PER_WEIGHT = {"float16": 2.0, "int8": 1.0, "int4": 0.5 + 4 / INT4_GROUP}
_LOG_EPS = np.float32(-1e4)  # the log-probability of nothing
_CHUNK = 4096  # texts searched at once
MAX_TREES = 8
"""The most trees a tree head holds."""
TWO_TREES_UP_TO = 100_000
"""``trees="auto"``: two trees for a head of at most this many labels, one above (a
second tree of 10^5 labels costs about 80 MB in float16 on 384-d vectors; of 10^6,
ten times that, where memory is what runs out first)."""
ROUTES = (0.25, 0.5, 0.75, 1.0)
"""The weights of the path a tree head tries on its validation rows (``route``)."""


def memory_bound(n_labels: int, dim: int, precision: str, max_bytes: int, trees: int = 1) -> int:
    """The bytes a tree head of ``n_labels`` labels on ``dim``-wide vectors holds (its
    weights, about 3% inner nodes, and the indices; times its ``trees``); refused in
    one line above ``max_bytes``."""
    rows = int(n_labels * 1.03) + 1
    need = trees * int(rows * (dim * BYTES_PER_WEIGHT[precision] + 4 + 4 + 8))
    if need > max_bytes:
        several = "" if trees == 1 else f" ({trees} trees)"
        raise DataError(
            f"a tree head{several} of {n_labels:,} labels on {dim}-wide vectors needs about "
            f"{need / 2**20:,.0f} MiB in {precision}; the bound is {max_bytes / 2**20:,.0f} MiB "
            "(the max_tree_bytes limit)"
        )
    return need


def search_params(params: Mapping[str, Any], n_trees: int) -> tuple[int, float, float]:
    """``(beam, route, threshold)`` of a stored tree head's params, each checked, and its
    tree count against the ``n_trees`` its tensors hold (a record written before heads
    held several trees has none: one); one line else (route in (0, 1], threshold in
    [0, 1])."""
    beam = params.get("beam", 10)
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise DataError(f"tree head record has a bad beam {beam!r}")
    found = []
    for name, default, zero_ok in (("route", 1.0, False), ("threshold", 0.5, True)):
        value = params.get(name, default)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not (0 <= value <= 1 if zero_ok else 0 < value <= 1):
            raise DataError(f"tree head record has a bad {name} {value!r}")
        found.append(float(value))
    trees = params.get("trees", 1)
    if isinstance(trees, bool) or trees != n_trees:
        raise DataError(f"tree head record says {trees!r} trees but its tensors hold {n_trees}")
    return int(beam), found[0], found[1]


def check_top_k(k: Any, n_labels: int, head: str | None = None) -> int:
    """``k`` as labels to answer: a positive integer no larger than the head's labels
    and :data:`KEEP`; one line else (naming the option ``{top_k}``)."""
    where = "{top_k}" + ("" if head is None else f" (head {head!r})")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ConfigError(f"{where} must be a positive integer, got {k!r}", options=("top_k",))
    if k > n_labels:
        raise ConfigError(
            f"{where} is {k} but the head has only {n_labels} labels", options=("top_k",)
        )
    if k > KEEP:
        raise ConfigError(
            f"{where} is {k}; a tree head answers at most its best {KEEP}", options=("top_k",)
        )
    return int(k)


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Integers in [-8, 7] (rows of an even width) as bytes of two: the even column in
    the low four bits, the odd one in the high four, each offset by 8."""
    u = (q.astype(np.int16) + 8).astype(np.uint8)
    return u[:, 0::2] | (u[:, 1::2] << 4)


_BYTE_PAIRS = (
    np.stack([(np.arange(256) & 0x0F) - 8, (np.arange(256) >> 4) - 8], axis=1)
    .astype(np.float32)
    .view(np.float64)
    .ravel()
)  # each byte's two weights as float32, read as one 8-byte value: one `take` a byte


def unpack_int4(packed: np.ndarray) -> np.ndarray:
    """The float32 integers :func:`pack_int4` packed."""
    return _BYTE_PAIRS.take(packed).view(np.float32).reshape(packed.shape[0], -1)


@dataclass(frozen=True)
class LabelTree:
    """A label tree as stored. Nodes ``0..n_inner-1`` are inner nodes (0 the root),
    node ``n_inner + j`` is label ``j``. The children of inner node ``u`` are
    ``children[start[u]:start[u+1]]``; their classifiers are the rows of ``weights``
    (times ``scales``: int8, a scale a row; int4, packed two a byte by
    :func:`pack_int4`, a scale for each :data:`INT4_GROUP` weights of a row) and
    ``bias`` at the same positions."""

    start: np.ndarray  # (n_inner + 1,) int64
    children: np.ndarray  # (n_nodes - 1,) int64: node ids
    weights: np.ndarray  # (n_nodes - 1, d) float16 or int8; (n_nodes - 1, d / 2) uint8: int4
    scales: np.ndarray | None  # int8: (n_nodes - 1,) float32; int4: (n_nodes - 1, d / 32)
    bias: np.ndarray  # (n_nodes - 1,) float32
    exclusive: bool  # multiclass: softmax among siblings; else a sigmoid per node

    @property
    def n_inner(self) -> int:
        return len(self.start) - 1

    @property
    def n_labels(self) -> int:
        return len(self.children) + 1 - self.n_inner

    @property
    def dim(self) -> int:
        packed = self.weights.dtype == np.uint8
        return int(self.weights.shape[1]) * (2 if packed else 1)

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """The classifiers of children ``lo:hi`` as float32 ``(d, hi - lo)``."""
        w = self.unscaled(lo, hi)
        if self.scales is not None and self.scales.ndim == 1:
            w *= self.scales[lo:hi, None]
        return w.T

    def unscaled(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo:hi`` of the weights as float32 ``(hi - lo, d)``: int4's group scales
        applied, not int8's scale a row (a product's column can take that after)."""
        if self.weights.dtype == np.uint8:
            w = unpack_int4(self.weights[lo:hi]).reshape(hi - lo, -1, INT4_GROUP)
            w *= self.scales[lo:hi, :, None]  # type: ignore[index]
            return w.reshape(hi - lo, -1)
        return self.weights[lo:hi].astype(np.float32)

    def nbytes(self) -> int:
        arrays = (self.start, self.children, self.weights, self.scales, self.bias)
        return int(sum(a.nbytes for a in arrays if a is not None))

    def tensors(self) -> dict[str, np.ndarray]:
        out = {
            "start": self.start.astype(np.int64),
            "children": self.children.astype(np.int64),
            "weights": self.weights,
            "bias": self.bias.astype(np.float32),
        }
        if self.scales is not None:
            out["scales"] = self.scales.astype(np.float32)
        return out

    @classmethod
    def check(cls, tensors: Mapping[str, np.ndarray], n_labels: int, exclusive: bool) -> LabelTree:
        """A tree from its record's tensors, every index and shape checked; one line else."""
        for name in ("start", "children", "weights", "bias"):
            if name not in tensors:
                raise DataError(f"head weights lack the tensor {name!r}")
        start, children = np.asarray(tensors["start"]), np.asarray(tensors["children"])
        weights = np.asarray(tensors["weights"])
        if start.dtype.kind not in "iu" or children.dtype.kind not in "iu":
            raise DataError("a tree head's 'start' and 'children' must be integers")
        if weights.dtype not in (np.float16, np.int8, np.uint8) or weights.ndim != 2:
            raise DataError(
                f"a tree head's weights must be a float16, int8 or packed int4 (uint8) "
                f"matrix, got {weights.dtype} of shape {weights.shape}"
            )
        scales = None
        if weights.dtype in (np.int8, np.uint8):
            scales = tensor(tensors, "scales")
        bias = tensor(tensors, "bias")
        if weights.dtype == np.float16 and not np.isfinite(weights).all():
            raise DataError("head tensor 'weights' holds non-finite values")
        n_inner = len(start) - 1
        n_edges = n_inner + n_labels - 1
        if start.ndim != 1 or n_inner < 1 or children.shape != (n_edges,):
            raise DataError(
                f"a tree head of {n_labels} labels has {len(start)} node offsets and "
                f"{children.shape} children; expected {n_inner + n_labels - 1} children"
            )
        groups = (n_edges, weights.shape[1] * 2 // INT4_GROUP)
        if (
            weights.shape[0] != n_edges
            or bias.shape != (n_edges,)
            or (
                scales is not None
                and scales.shape != (groups if weights.dtype == np.uint8 else (n_edges,))
            )
        ):
            raise DataError(f"a tree head's weights must have one row per child ({n_edges})")
        if start[0] != 0 or start[-1] != n_edges or (np.diff(start) < 1).any():
            raise DataError("a tree head's node offsets must rise from 0 to its children")
        seen = np.zeros(n_inner + n_labels, dtype=np.int64)
        if children.min() < 1 or children.max() >= n_inner + n_labels:
            raise DataError("a tree head's children must name nodes of the tree")
        np.add.at(seen, children, 1)
        if seen[0] != 0 or (seen[1:] != 1).any():
            raise DataError("a tree head's nodes must each have one parent (the root none)")
        # every inner child lies below its parent: the tree has no cycle
        owner = np.repeat(np.arange(n_inner), np.diff(start))
        inner = children < n_inner
        if (children[inner] <= owner[inner]).any():
            raise DataError("a tree head's inner nodes must come after their parents")
        return cls(
            start.astype(np.int64),
            children.astype(np.int64),
            weights,
            scales,
            bias,
            exclusive,
        )

    @classmethod
    def of(cls, tensors: Mapping[str, np.ndarray], exclusive: bool) -> LabelTree:
        """A tree from tensors :meth:`check` has already judged (a checked record's)."""
        scales = tensors.get("scales")
        return cls(
            tensors["start"],
            tensors["children"],
            tensors["weights"],
            None if scales is None else np.asarray(scales, dtype=np.float32),
            np.asarray(tensors["bias"], dtype=np.float32),
            exclusive,
        )


def _path_scores(
    tree: LabelTree,
    z: np.ndarray,
    child: np.ndarray,
    seg: np.ndarray,
    width: np.ndarray,
    route: float,
) -> np.ndarray:
    """Children's log-probabilities from their logits ``z`` (flat: a run of ``width``
    siblings at each ``seg``; ``child``: their node ids), an inner node's at the path's
    weight ``route``: a softmax among siblings (multiclass) or a sigmoid each."""
    z = np.asarray(z, dtype=np.float32)
    if tree.exclusive:
        z = z - np.repeat(np.maximum.reduceat(z, seg), width)
        z -= np.repeat(np.log(np.add.reduceat(np.exp(z), seg)), width)
    else:
        z = -np.logaddexp(np.float32(0), -z)
    if route != 1.0:
        z *= np.where(child < tree.n_inner, np.float32(route), np.float32(1))
    return z.astype(np.float32, copy=False)


def _best_per_row(rows: np.ndarray, score: np.ndarray, k: int, n: int) -> np.ndarray:
    """Positions of the ``k`` highest scores of each of ``n`` rows (rows in any order)."""
    # rows are below _CHUNK: 16-bit keys take numpy's radix sort
    order = np.argsort(rows.astype(np.int16 if n <= 2**15 else np.int64), kind="stable")
    r = rows[order]
    counts = np.bincount(r, minlength=n)
    if not len(r) or counts.max() <= k:
        return order
    col = np.arange(len(r)) - (np.cumsum(counts) - counts)[r]
    width = int(counts.max())
    # a row's empty places: below any score, and distinct (numpy's selection slows
    # down on many equal values)
    table = np.empty((n, width), dtype=np.float32)
    table[:] = np.float32(-1e30) * (1 + np.arange(width, dtype=np.float32) / width)
    table[r, col] = score[order]
    where = np.full((n, width), -1, dtype=np.int64)
    where[r, col] = order
    top = np.argpartition(table, width - k, axis=1)[:, width - k :]
    picked = np.take_along_axis(where, top, axis=1).ravel()
    return picked[picked >= 0]


def _expand(
    tree: LabelTree,
    X: np.ndarray,
    rows: np.ndarray,
    nodes: np.ndarray,
    scores: np.ndarray,
    route: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The children of inner ``nodes`` (sorted) reached by texts ``rows`` with
    ``scores``: their rows, node ids and scores, a run of children a pair. Only the
    products go node by node (one for all the texts that reach a node)."""
    first = tree.start[nodes]
    width = tree.start[nodes + 1] - first
    cuts = np.flatnonzero(np.diff(nodes)) + 1
    products = [
        (X[rows[lo:hi]] @ tree.unscaled(first[lo], first[lo] + width[lo]).T).ravel()
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(nodes)], strict=True)
    ]
    z = np.concatenate(products)
    seg = np.r_[0, np.cumsum(width)[:-1]]  # where each pair's children begin
    edge = np.repeat(first - seg, width) + np.arange(len(z))
    if tree.scales is not None and tree.scales.ndim == 1:  # int8: a scale a row
        z *= tree.scales[edge]
    z += tree.bias[edge]
    child = tree.children[edge]
    z = _path_scores(tree, z, child, seg, width, route)
    z += np.repeat(scores, width)
    return np.repeat(rows, width), child, z


def _in_chunks(
    answer: Callable[[np.ndarray, np.ndarray], sp.csr_matrix],
    X: np.ndarray,
    root_logits: np.ndarray,
) -> sp.csr_matrix:
    """``answer(X, root_logits)`` on :data:`_CHUNK` texts at a time, stacked (CSR)."""
    parts = [
        answer(X[i : i + _CHUNK], root_logits[i : i + _CHUNK]) for i in range(0, X.shape[0], _CHUNK)
    ]
    return sp.vstack(parts, format="csr")


def beam_search(
    tree: LabelTree,
    X: np.ndarray,
    root_logits: np.ndarray,
    beam: int,
    keep: int = KEEP,
    route: float = 1.0,
) -> sp.csr_matrix:
    """Each row's ``keep`` best labels with their probabilities (texts x labels, CSR),
    scoring only the children of each level's ``beam`` best inner nodes.

    ``root_logits``: the root's children's logits (the fused product's columns).
    ``route``: the weight of the inner nodes' log-probabilities in a label's score (1:
    the product of the probabilities on its path; less: the path counts less against
    the label's own classifier; a tree head chooses it on its validation rows)."""
    if X.shape[0] > _CHUNK:  # the search's tables stay small
        return _in_chunks(lambda x, z: beam_search(tree, x, z, beam, keep, route), X, root_logits)
    n, n_inner = X.shape[0], tree.n_inner
    if n == 0:
        return sp.csr_matrix((0, tree.n_labels), dtype=np.float32)
    X = np.asarray(X, dtype=np.float32)
    m = int(tree.start[1])  # the root's children
    rows = np.repeat(np.arange(n), m)
    nodes = np.tile(tree.children[:m], n)
    width = np.full(n, m)
    scores = _path_scores(tree, np.ravel(root_logits), nodes, np.arange(n) * m, width, route)
    found_rows, found_labels, found_scores = [], [], []
    while len(nodes):
        leaf = nodes >= n_inner
        found_rows.append(rows[leaf])
        found_labels.append(nodes[leaf] - n_inner)
        found_scores.append(scores[leaf])
        rows, nodes, scores = rows[~leaf], nodes[~leaf], scores[~leaf]
        if not len(nodes):
            break
        best = _best_per_row(rows, scores, beam, n)
        rows, nodes, scores = rows[best], nodes[best], scores[best]
        by_node = np.argsort(nodes, kind="stable")
        rows, nodes, scores = rows[by_node], nodes[by_node], scores[by_node]
        rows, nodes, scores = _expand(tree, X, rows, nodes, scores, route)
    rows = np.concatenate(found_rows)
    labels = np.concatenate(found_labels)
    scores = np.concatenate(found_scores)
    best = _best_per_row(rows, scores, keep, n)
    rows, labels, scores = rows[best], labels[best], scores[best]
    proba = np.exp(np.maximum(scores, _LOG_EPS)).astype(np.float32)
    out = sp.csr_matrix((proba, (rows, labels)), shape=(n, tree.n_labels), dtype=np.float32)
    out.sort_indices()
    return out


def tree_count(trees: int | str, n_labels: int) -> int:
    """The trees of a head of ``n_labels`` labels: ``trees``, or for ``"auto"`` two up
    to :data:`TWO_TREES_UP_TO` labels and one above."""
    if trees == "auto":
        return 2 if n_labels <= TWO_TREES_UP_TO else 1
    return int(trees)


TREES_EXPECTED = f"'auto' or an integer from 1 to {MAX_TREES}"
"""What a head's ``trees`` may be, as a refusal says it."""


def trees_ok(trees: Any) -> bool:
    """Whether ``trees`` is ``"auto"`` or a count from 1 to :data:`MAX_TREES`."""
    return trees == "auto" or (
        isinstance(trees, int) and not isinstance(trees, bool) and 1 <= trees <= MAX_TREES
    )


def forest_tensors(trees: Sequence[LabelTree]) -> dict[str, np.ndarray]:
    """The stored tensors of a head's trees: the first's by their names, tree ``t``'s
    as ``tree{t}.<name>``."""
    out: dict[str, np.ndarray] = {}
    for t, tree in enumerate(trees):
        prefix = f"tree{t}." if t else ""
        out.update({prefix + name: value for name, value in tree.tensors().items()})
    return out


def _split_forest(tensors: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    groups: dict[int, dict[str, np.ndarray]] = {}
    for name, value in tensors.items():
        head, dot, rest = name.partition(".")
        t = 0
        if dot and head.startswith("tree") and head[4:].isdigit():
            t, name = int(head[4:]), rest
        groups.setdefault(t, {})[name] = value
    if sorted(groups) != list(range(len(groups))) or len(groups) > MAX_TREES:
        raise DataError(
            f"a tree head's tensors must hold trees 0 to k-1 (at most {MAX_TREES}), "
            f"found trees {sorted(groups)[: MAX_TREES + 1]}"
        )
    return [groups[t] for t in range(len(groups))]


def check_forest(
    tensors: Mapping[str, np.ndarray], n_labels: int, exclusive: bool
) -> tuple[LabelTree, ...]:
    """A head's trees from its record's tensors (:func:`forest_tensors`), each checked
    (:meth:`LabelTree.check`, all of one width); one line else."""
    trees = tuple(LabelTree.check(group, n_labels, exclusive) for group in _split_forest(tensors))
    if len({tree.dim for tree in trees}) > 1:
        raise DataError("a tree head's trees must all read vectors of one width")
    return trees


def forest_of(tensors: Mapping[str, np.ndarray], exclusive: bool) -> tuple[LabelTree, ...]:
    """A head's trees from tensors :func:`check_forest` has already judged."""
    return tuple(LabelTree.of(group, exclusive) for group in _split_forest(tensors))


def roots(trees: Sequence[LabelTree]) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)``: every tree's root classifier side by side, float32 ``(d, roots)``:
    the head's columns of the fused product."""
    Ws, bs = [], []
    for tree in trees:
        m = int(tree.start[1])
        Ws.append(tree.rows(0, m))
        bs.append(tree.bias[:m])
    return np.hstack(Ws), np.concatenate(bs)


def search(
    trees: Sequence[LabelTree],
    X: np.ndarray,
    root_logits: np.ndarray,
    beam: int,
    keep: int = KEEP,
    route: float = 1.0,
) -> sp.csr_matrix:
    """Each row's ``keep`` best labels by the mean of its trees' probabilities (each
    tree searched by :func:`beam_search` for its best ``max(keep, KEEP)``; a label a
    tree's search did not reach counts 0 there). ``root_logits``: the trees' roots'
    logits side by side (:func:`roots`)."""
    if len(trees) == 1:
        return beam_search(trees[0], X, root_logits, beam, keep, route)
    if X.shape[0] > _CHUNK:  # the tables of the best labels stay small
        return _in_chunks(lambda x, z: search(trees, x, z, beam, keep, route), X, root_logits)
    n, cuts = X.shape[0], np.cumsum([0] + [int(tree.start[1]) for tree in trees])
    each = max(keep, KEEP)  # what each tree keeps before the mean
    total = sp.csr_matrix((n, trees[0].n_labels), dtype=np.float32)
    for tree, lo, hi in zip(trees, cuts[:-1], cuts[1:], strict=True):
        total = total + beam_search(tree, X, root_logits[:, lo:hi], beam, each, route)
    total = total.tocsr()
    rows = np.repeat(np.arange(n), np.diff(total.indptr))
    best = _best_per_row(rows, total.data, keep, n)
    proba = total.data[best] / np.float32(len(trees))
    out = sp.csr_matrix(
        (proba, (rows[best], total.indices[best])), shape=total.shape, dtype=np.float32
    )
    out.sort_indices()
    return out
