"""How well a set of vectors separates a task's labels, before any head is trained:
pure functions of vectors and labels (numpy, scikit-learn).

- :func:`knn_accuracy`: leave-one-out k-nearest-neighbour accuracy;
- :func:`discordance`: a chance-calibrated neighbourhood score, 0.5 for vectors that
  know nothing of the labels, 1.0 when an item's nearest neighbours always share its
  label;
- :func:`linear_probe`: a linear head (logistic regression) fitted on part of the
  items and scored on the rest.

Vectors are an ``n × d`` array or a SciPy CSR matrix; their rows are L2-normalised
here (trunk vectors already are), so nearness is cosine similarity. ``groups`` (one
per item, optional) keep related items apart: an item's neighbours and candidates
never come from its own group, and the probe's split keeps each group on one side,
as a grouped train / test split does for a trained head.

Labels are one per item (``multiclass``, ``binary``) or a list per item
(``multilabel``, ``hierarchical``: the list of paths). A list-per-item task is
reduced as its heads are judged, by exact match: kNN predicts each label by the
majority of the neighbours and is right when the whole set is; the probe is a
multilabel head (one sigmoid per label) and is right when the whole set is; the
discordance treats each distinct label set as one class (two items agree when their
sets are equal).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data import split_indices
from ..errors import ConfigError, DataError, one_of, positive_int
from ..heads.kinds import KINDS, Kind, kind_of

__all__ = [
    "ProbeResult",
    "discordance",
    "knn_accuracy",
    "linear_probe",
    "span_coordinates",
]

_BLOCK = 2_000_000  # similarities computed per block of rows: at most this many at once


@dataclass(frozen=True)
class ProbeResult:
    """A linear probe: its test ``accuracy`` (exact match for list-per-item labels),
    the ``C`` picked, the items it was fitted on (its validation quarter apart) and
    those it was scored on."""

    accuracy: float
    C: float
    n_train: int
    n_test: int


@dataclass(frozen=True)
class _Items:
    X: Any  # unit rows, float32 (dense or CSR)
    codes: np.ndarray  # a class per item: its label, or its label set
    names: list[Any]  # the class of each code
    groups: np.ndarray  # a group index per item (each item its own without groups)
    kind: Kind
    labels: list[Any]


def _items(X: Any, labels: Sequence[Any], kind: str, groups: Sequence[Any] | None) -> _Items:
    """The inputs checked and put in one shape (one-line errors)."""
    from sklearn.preprocessing import normalize

    found = kind_of(one_of(kind, tuple(KINDS), "kind"))
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float32)
        values = X.data
    else:
        X = np.asarray(X, dtype=np.float32)
        values = X
    if X.ndim != 2:
        raise DataError(f"vectors must be a 2-D array (items × dimensions), got shape {X.shape}")
    n = X.shape[0]
    labels = list(labels)
    if n != len(labels):
        raise DataError(f"{n} vectors but {len(labels)} labels")
    if n < 2:
        raise DataError(f"need at least 2 items, got {n}")
    if not np.isfinite(values).all():
        raise DataError("vectors hold NaN or infinite values")
    if found.is_set:
        for i, labs in enumerate(labels):
            if isinstance(labs, str | bytes) or not isinstance(labs, Sequence | set | frozenset):
                raise DataError(
                    f"label #{i} of a {kind} task must be a list of labels, got "
                    f"{type(labs).__name__}"
                )
    else:
        for i, label in enumerate(labels):
            if isinstance(label, list | tuple | set | dict) or label is None:
                raise DataError(f"label #{i} of a {kind} task must be one label, got {label!r}")
    keys: list[Any] = [found.label_key(label) for label in labels]
    index: dict[Any, int] = {}
    codes = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    if len(index) < 2:
        what = found.label_word
        raise DataError(
            f"every item has the {what} {keys[0]!r}: separability needs at least two {what}s"
        )
    if groups is None:
        group_codes = np.arange(n)
    else:
        groups = list(groups)
        if len(groups) != n:
            raise DataError(f"{n} vectors but {len(groups)} groups")
        seen: dict[Any, int] = {}
        group_codes = np.array([seen.setdefault(g, len(seen)) for g in groups], dtype=np.int64)
    return _Items(normalize(X), codes, list(index), group_codes, found, labels)


def _check_k(k: int, items: _Items) -> int:
    """``k`` when every item has at least ``k`` items outside its own group."""
    positive_int(k, "k")
    n = len(items.codes)
    room = n - int(np.bincount(items.groups).max())
    if k > room:
        raise ConfigError(
            f"{{k}} must be smaller than the number of items ({n}), got {k}"
            if room == n - 1
            else f"{{k}} must be at most the items outside the largest group ({room}), got {k}",
            options=("k",),
        )
    return k


def _similarity_blocks(items: _Items) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(rows, similarities of those rows to every item)``, a block at a time; an item
    and its own group's items are at ``-inf``."""
    n = len(items.codes)
    step = max(1, _BLOCK // n)
    for start in range(0, n, step):
        rows = np.arange(start, min(n, start + step))
        sims = items.X[rows] @ items.X.T
        sims = np.asarray(sims.toarray() if sp.issparse(sims) else sims, dtype=np.float64)
        sims[items.groups[rows][:, None] == items.groups[None, :]] = -np.inf
        yield rows, sims


def knn_accuracy(
    X: Any,
    labels: Sequence[Any],
    *,
    kind: str = "multiclass",
    k: int = 10,
    groups: Sequence[Any] | None = None,
) -> float:
    """Leave-one-out k-nearest-neighbour accuracy.

    Each item is answered by its ``k`` most cosine-similar items (never itself nor
    an item of its own group): single-label tasks by the majority label (a tie goes
    to the label whose neighbours are nearer in sum), list-per-item tasks label by
    label (a label when more than half the neighbours have it), right when the whole
    set is. Not chance-calibrated: a task whose commonest label covers 60% of the
    items can score about 0.6 on vectors that know nothing.
    """
    items = _items(X, labels, kind, groups)
    k = _check_k(k, items)
    right = 0
    if items.kind.is_set:
        names = sorted({str(v) for labs in items.labels for v in labs})
        where = {v: j for j, v in enumerate(names)}
        Y = np.zeros((len(items.labels), len(names)), dtype=np.int32)
        for i, labs in enumerate(items.labels):
            Y[i, [where[str(v)] for v in labs]] = 1
    for rows, sims in _similarity_blocks(items):
        near = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        if items.kind.is_set:
            votes = Y[near].sum(axis=1)  # rows × labels
            right += int(((2 * votes > k) == (Y[rows] > 0)).all(axis=1).sum())
            continue
        near_sims = np.take_along_axis(sims, near, axis=1)
        votes = np.zeros((len(rows), len(items.names)))
        # one vote per neighbour, plus its similarity scaled below one vote in sum
        np.add.at(
            votes,
            (np.repeat(np.arange(len(rows)), k), items.codes[near].ravel()),
            1.0 + near_sims.ravel() / (2 * k + 1),
        )
        right += int((votes.argmax(axis=1) == items.codes[rows]).sum())
    return right / len(items.codes)


def discordance(
    X: Any,
    labels: Sequence[Any],
    *,
    kind: str = "multiclass",
    k: int = 10,
    candidates: int = 30,
    groups: Sequence[Any] | None = None,
    seed: int = 0,
) -> float:
    """A chance-calibrated neighbourhood score: how often an item's nearest neighbours
    share its label, when same-label and other-label neighbours are offered in equal
    numbers.

    For each item (the anchor), ``m`` items with its label and ``m`` items with
    another label are drawn at random, without replacement, from outside its group
    (``m`` is ``candidates``, or fewer where the anchor's label, or the other labels,
    have fewer items); the anchor's ``min(k, m)`` most cosine-similar items among
    these ``2m`` are taken (equal similarities in a random order), and the anchor
    scores the share of them that have its label. The result is the mean over the
    anchors; an anchor whose label has no other item outside its group is left out.
    List-per-item labels: an item's label is its label set.

    0.5 is chance: vectors that know nothing of the labels (whose similarities do not
    depend on them) score 0.5 in expectation, whatever the labels' frequencies, since
    the same-label candidates are then as likely to be the nearest as the others.
    1.0: the nearest candidates always share the anchor's label; below 0.5: other
    labels are nearer than the anchor's own. Unlike :func:`knn_accuracy`, the score
    does not grow with the commonest label's share, so tasks compare. Seeded: the
    same ``seed``, the same draws.
    """
    items = _items(X, labels, kind, groups)
    positive_int(k, "k")
    positive_int(candidates, "candidates")
    if k > candidates:
        raise ConfigError(
            f"{{k}} must be at most {{candidates}} ({candidates}), got {k}",
            options=("k", "candidates"),
        )
    rng = np.random.default_rng(seed)
    codes, groups_ = items.codes, items.groups
    by_class = [np.flatnonzero(codes == c) for c in range(len(items.names))]
    scores: list[float] = []
    for rows, sims in _similarity_blocks(items):
        for j, a in enumerate(rows):
            same = by_class[codes[a]]
            same = same[groups_[same] != groups_[a]]
            other = np.flatnonzero((codes != codes[a]) & (groups_ != groups_[a]))
            m = min(candidates, len(same), len(other))
            if m == 0:
                continue
            drawn = np.concatenate(
                [rng.choice(same, m, replace=False), rng.choice(other, m, replace=False)]
            )
            mine = np.arange(2 * m) < m
            order = rng.permutation(2 * m)  # equal similarities: a random order
            nearest = order[np.argsort(-sims[j, drawn[order]], kind="stable")[: min(k, m)]]
            scores.append(float(mine[nearest].mean()))
    if not scores:
        raise DataError(
            "no label has two items"
            + (" outside one group" if groups is not None else "")
            + ": the discordance needs items that share a label"
        )
    return float(np.mean(scores))


def span_coordinates(X: Any) -> Any:
    """The unit rows of ``X`` as coordinates in the span of those rows, when the rows
    are fewer than their width: a dense ``Z`` (rows × at most rows) with ``Z Zᵀ = X Xᵀ``;
    else ``X`` as it is. Every score here depends on the vectors only through their
    inner products: kNN accuracy and the discordance score ``Z`` exactly as ``X``; the
    probe fits the same model (an L2-regularised linear model's weights are a
    combination of the rows it is fitted on, so its optimum is the same), found to the
    solver's tolerance, which can move its accuracy by a point or two. Sooner when
    ``X`` is wide: a diagnosis computes it once per trunk."""
    from sklearn.preprocessing import normalize

    if X.shape[1] <= X.shape[0]:
        return X
    X = normalize(sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.asarray(X))
    K = X @ X.T
    K = np.asarray(K.toarray() if sp.issparse(K) else K, dtype=np.float64)
    values, vectors = np.linalg.eigh(K)
    keep = values > max(values.max(), 0.0) * 1e-9
    return (vectors[:, keep] * np.sqrt(values[keep])).astype(np.float32)


def linear_probe(
    X: Any,
    labels: Sequence[Any],
    *,
    kind: str = "multiclass",
    groups: Sequence[Any] | None = None,
    split: tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray] | None = None,
    test_fraction: float = 0.3,
    C: float | str = "auto",
    seed: int = 0,
) -> ProbeResult:
    """A linear head fitted on part of the items and scored on the rest: accuracy,
    exact match for label sets.

    The head is the one training fits (:class:`manyheads.heads.LinearHead`: logistic
    regression, softmax or one sigmoid per label; a hierarchical task's paths taken
    as plain labels), with ``C="auto"`` picked, the temperature and the decision
    thresholds tuned for accuracy on a quarter of the train part, and fitted on the
    other three quarters. ``split``: the ``(train, test)`` item indices; else
    ``test_fraction`` of the items are held out, whole groups when ``groups`` are
    given, else stratified by label where every label has two items
    (:func:`manyheads.data.split_indices`, seeded; the quarter is split off the same
    way). A test item whose single label the head never saw counts as an error;
    labels of a set it never saw are dropped from that item's truth. Vectors wider
    than the items are many are fitted as their coordinates in the span of the items'
    vectors (the same inner products, so the same optimum, found to the solver's
    tolerance, sooner).
    """
    from ..heads.linear import LinearHead

    items = _items(X, labels, kind, groups)
    n = len(items.codes)
    group_list = None if groups is None else items.groups.tolist()
    if split is None:
        train, test = split_indices(
            n, stratify=items.codes.tolist(), groups=group_list, val_fraction=test_fraction,
            seed=seed,
        )  # fmt: skip
    else:
        train, test = (np.asarray(s, dtype=np.int64) for s in split)
        if len(train) == 0 or len(test) == 0 or min(train.min(), test.min()) < 0:
            raise DataError("the probe's split needs items on both sides")
        if max(train.max(), test.max()) >= n:
            raise DataError(f"the probe's split names item {max(train.max(), test.max())} of {n}")
    inner_groups = None if group_list is None else [group_list[i] for i in train]
    fit, val = split_indices(
        len(train), stratify=items.codes[train].tolist(), groups=inner_groups,
        val_fraction=0.25, seed=seed,
    )  # fmt: skip
    fit, val = train[fit], train[val]
    if len(set(items.codes[fit].tolist())) < 2:
        raise DataError("the probe's train part holds one label only; give more items")
    sets = items.kind.is_set
    if sets:
        y: list[Any] = [[str(v) for v in labs] for labs in items.labels]
    else:
        y = [str(v) for v in items.labels]
    head = LinearHead(kind="multilabel" if sets else kind, C=C, thresholds="accuracy")
    Z = span_coordinates(items.X)
    head.fit(Z[fit], [y[i] for i in fit], X_val=Z[val], y_val=[y[i] for i in val])
    picked = head.predict(Z[test])
    if sets:
        where = {c: j for j, c in enumerate(head.classes_.tolist())}
        truth = np.zeros_like(picked)
        for row, i in enumerate(test):
            truth[row, [where[v] for v in y[i] if v in where]] = 1
        right = (picked == truth).all(axis=1)
    else:
        right = np.asarray(picked) == np.asarray([y[i] for i in test], dtype=object)
    return ProbeResult(float(right.mean()), float(head.C_), len(fit), len(test))
