"""Evaluation protocols beside the holdout one (a bundle's own heads scored on labelled
rows, :mod:`manyheads.evaluate.holdout`), for figures comparable with published ones:

- ``mteb``: MTEB's classification protocol (``mteb.abstasks.classification``,
  ``AbsTaskClassification``, as in mteb 2.26). On a train set and a test set of
  vectors, ``experiments`` times (10): the train rows' order is shuffled by a
  ``numpy.random.RandomState(seed)`` made anew each time (seed 42), each shuffle
  starting from the order the one before left; the first ``k`` rows of each label in
  that order (8) train a scikit-learn ``LogisticRegression(max_iter=100,
  random_state=seed)``, which labels the whole test set. Scores per experiment:
  accuracy, macro-F1, weighted F1 (and, for a test set of two labels, the average
  precision of the predicted labels, as MTEB computes it); the result is their mean
  and standard deviation. Single-label heads only (MTEB's multilabel tasks are
  another protocol).
- ``kfold``: ``folds``-fold cross-validation of fresh heads on the bundle's vectors:
  grouped folds (``GroupKFold``) when groups are given, else stratified (multiclass /
  binary) or plain (multilabel / hierarchical), shuffled by ``seed``; in each train
  part a fifth is held out (by group where there are groups) to calibrate the head as
  ``fit_head`` does; the held-out fold is scored as ``eval`` scores a file. The
  result is the mean and standard deviation of each metric over the folds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any, TypedDict

import numpy as np

from ..errors import ConfigError, DataError, one_of, positive_int
from ..heads.kinds import kind_of
from .holdout import head_scores

__all__ = [
    "MTEB_K",
    "MTEB_SEED",
    "PROTOCOLS",
    "ProtocolOptions",
    "check_protocol",
    "check_values",
    "evaluate_with",
    "kfold_scores",
    "mean_and_std",
    "mteb_scores",
]

PROTOCOLS = ("holdout", "mteb", "kfold")
MTEB_SEED = 42  # an MTEB task's default seed
MTEB_K = 8  # its training rows per label


class ProtocolOptions(TypedDict, total=False):
    """The settings of the ``mteb`` and ``kfold`` protocols (see the module's text)."""

    train_texts: Sequence[str] | None  # mteb: the train set
    train_labels: Mapping[str, Sequence[Any]] | None  # mteb: its labels, by head
    k: int  # mteb: training rows per label in each experiment (8)
    experiments: int  # mteb: 10
    folds: int  # kfold: 5
    groups: Sequence[Any] | None  # kfold: a group per text, kept in one fold
    seed: int | None  # mteb: 42; kfold: 0


def check_protocol(protocol: str, given: Collection[str], report: Any = None) -> None:
    """Refuse a protocol that is not one, a setting (by name, ``given``) that is not its
    own, a report for another protocol than holdout, mteb without a train set: before
    any file is read or text embedded."""
    one_of(protocol, PROTOCOLS, "protocol")
    own = {"holdout": set(), "mteb": {"train_texts", "train_labels", "k", "experiments", "seed"},
           "kfold": {"folds", "groups", "seed"}}[protocol]  # fmt: skip
    extra = sorted(set(given) - own)
    if extra:
        raise ConfigError(
            f"{{{extra[0]}}} is not a setting of {{protocol}} {protocol}",
            options=(extra[0], "protocol"),
        )
    if report is not None and protocol != "holdout":
        raise ConfigError("{report} is for {protocol} holdout", options=("report", "protocol"))
    if protocol == "mteb" and "train_texts" not in given:
        raise ConfigError(
            "{protocol} mteb needs a train set: give {train_texts}",
            options=("protocol", "train_texts"),
        )


def check_values(kinds: Mapping[str, str], n_texts: int, options: ProtocolOptions) -> None:
    """The settings' values: counts positive, mteb's heads single-label, a group per
    text."""
    for name in ("k", "experiments", "folds"):
        if name in options:
            positive_int(options[name], name)
    if "train_texts" in options:
        for name, kind in kinds.items():
            if kind_of(kind).is_set:
                raise ConfigError(
                    f"{{protocol}} mteb scores single-label heads; head {name!r} is {kind}",
                    options=("protocol",),
                )
    groups = options.get("groups")
    if groups is not None and len(groups) != n_texts:
        raise DataError(f"{n_texts} texts but {len(groups)} groups")


def mean_and_std(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each numeric score's mean over ``runs`` and its (population) standard deviation
    as ``NAME_std``; the runs themselves under ``runs``."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values and len(values) == len(runs) and not isinstance(runs[0][key], bool):
            out[key] = float(np.mean(values))
            out[f"{key}_std"] = float(np.std(values))
    out["runs"] = [dict(r) for r in runs]
    return out


def _undersampled(labels: Sequence[Any], order: list[int], k: int) -> list[int]:
    """The first ``k`` rows of each label, in ``order``."""
    seen: dict[Any, int] = defaultdict(int)
    picked = []
    for i in order:
        if seen[labels[i]] < k:
            picked.append(i)
            seen[labels[i]] += 1
    return picked


def mteb_scores(
    X_train: Any,
    y_train: Sequence[Any],
    X_test: Any,
    y_test: Sequence[Any],
    *,
    k: int | None = None,
    experiments: int = 10,
    seed: int = MTEB_SEED,
    progress: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """MTEB's classification protocol on these vectors (see the module's text). ``k``
    given, every label must have ``k`` training rows; left to MTEB's default (8), a
    label with fewer trains on those it has, as in MTEB (``labels_below_k``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score

    asked = k is not None
    k = positive_int(k, "k") if asked else MTEB_K
    positive_int(experiments, "experiments")
    # labels as the indexes of the sorted labels, as MTEB's datasets hold them (the
    # average precision's positive class is 1: a binary head's second label)
    classes = {lab: i for i, lab in enumerate(sorted({*y_train, *y_test}, key=str))}
    y_train, y_test = [classes[v] for v in y_train], [classes[v] for v in y_test]
    counts: dict[Any, int] = defaultdict(int)
    for label in y_train:
        counts[label] += 1
    names = {i: lab for lab, i in classes.items()}
    short = sorted((n, str(names[lab])) for lab, n in counts.items() if n < k)
    if short and asked:
        n, lab = short[0]
        raise ConfigError(
            f"{{k}} is {k}, but label {lab!r} has {n} training rows "
            f"({len(short)} labels have fewer than {k})",
            options=("k",),
        )
    order = list(range(len(y_train)))
    runs = []
    for _ in range(experiments):
        np.random.RandomState(seed).shuffle(order)  # anew each time, from the last order
        picked = _undersampled(y_train, order, k)
        model = LogisticRegression(max_iter=100, random_state=seed)
        model.fit(X_train[picked], [y_train[i] for i in picked])
        predicted = model.predict(X_test)
        run = {
            "accuracy": float(accuracy_score(y_test, predicted)),
            "macro_f1": float(f1_score(y_test, predicted, average="macro")),
            "weighted_f1": float(f1_score(y_test, predicted, average="weighted")),
        }
        if len(set(y_test)) == 2:
            run["average_precision"] = float(average_precision_score(y_test, predicted))
        runs.append(run)
        if progress is not None:
            progress()
    found = {"protocol": "mteb", "k": k, "experiments": experiments, **mean_and_std(runs)}
    return found | {"labels_below_k": len(short)}


def _splits(
    kind: str, labels: Sequence[Any], groups: Sequence[Any] | None, folds: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

    rows = np.arange(len(labels))
    if groups is not None:
        if len(set(groups)) < folds:
            raise ConfigError(
                f"{{folds}} is {folds}, but the rows have {len(set(groups))} groups",
                options=("folds",),
            )
        splitter = GroupKFold(n_splits=folds, shuffle=True, random_state=seed)
        return list(splitter.split(rows, groups=list(groups)))
    if len(labels) < folds:
        raise ConfigError(
            f"{{folds}} is {folds}, but there are {len(labels)} rows", options=("folds",)
        )
    strat = kind_of(kind).strata(labels)
    if strat is None or min(strat.count(v) for v in set(strat)) < folds:
        return list(KFold(folds, shuffle=True, random_state=seed).split(rows))
    return list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(rows, strat))


def kfold_scores(
    make_head: Callable[[], Any],
    X: Any,
    labels: Sequence[Any],
    *,
    folds: int = 5,
    groups: Sequence[Any] | None = None,
    seed: int = 0,
    progress: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """``folds``-fold cross-validation of fresh heads (``make_head()``: an unfitted
    head of the kind and type to judge) on the vectors ``X`` (see the module's text)."""
    from sklearn.model_selection import GroupShuffleSplit, ShuffleSplit

    positive_int(folds, "folds")
    if folds < 2:
        raise ConfigError(f"{{folds}} must be at least 2, got {folds}", options=("folds",))
    labels = list(labels)
    kind = make_head().kind
    runs = []
    for train, test in _splits(kind, labels, groups, folds, seed):
        if groups is not None and len({groups[i] for i in train}) > 1:
            part = GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=seed)
            fit, val = next(part.split(train, groups=[groups[i] for i in train]))
        else:
            fit, val = next(ShuffleSplit(1, test_size=0.2, random_state=seed).split(train))
        fit, val = train[fit], train[val]
        head = make_head()
        try:
            head.fit(X[fit], [labels[i] for i in fit], X_val=X[val], y_val=[labels[i] for i in val])
        except DataError as exc:
            raise DataError(f"a fold's training rows: {exc}") from None
        scores = head_scores(head, X[test], [labels[i] for i in test], unseen=True)
        runs.append({k: v for k, v in scores.items() if not isinstance(v, dict)})
        if progress is not None:
            progress()
    return {"protocol": "kfold", "folds": folds, **mean_and_std(runs)}


def evaluate_with(
    protocol: str,
    heads: Mapping[str, Any],
    embed: Callable[[Sequence[str]], Any],
    texts: Sequence[str],
    labels: Mapping[str, Sequence[Any]],
    options: ProtocolOptions,
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """The ``mteb`` or ``kfold`` protocol for each head of ``heads`` that ``labels``
    names (``embed``: the trunk's vectors of texts; a head's kind and settings are
    those of the bundle's head)."""
    from sklearn.base import clone

    from .._progress import progress_bar

    X = embed(texts)
    seed = options.get("seed")
    if protocol == "mteb":
        train_texts = list(options.get("train_texts") or [])
        train_labels = options.get("train_labels") or {}
        X_train = embed(train_texts)
        runs = int(options.get("experiments", 10))
    else:
        runs = int(options.get("folds", 5))
    out = {}
    with progress_bar(total=runs * len(heads), desc=protocol, enabled=progress) as bar:
        for name, head in heads.items():
            y = list(labels[name])
            if len(y) != len(texts):
                raise DataError(f"head {name!r}: {len(texts)} texts but {len(y)} labels")
            if protocol == "mteb":
                if name not in train_labels:
                    raise DataError(f"the train set has no labels for head {name!r}")
                if len(train_labels[name]) != len(train_texts):
                    raise DataError(
                        f"head {name!r}: {len(train_texts)} train texts but "
                        f"{len(train_labels[name])} train labels"
                    )
                found = mteb_scores(
                    X_train, list(train_labels[name]), X, y, k=options.get("k"),
                    experiments=runs, seed=MTEB_SEED if seed is None else seed,
                    progress=bar.update,
                )  # fmt: skip
            else:
                fresh: Callable[[], Any] = partial(clone, head)
                found = kfold_scores(
                    fresh, X, y, folds=runs, groups=options.get("groups"),
                    seed=0 if seed is None else seed, progress=bar.update,
                )  # fmt: skip
            out[name] = {"kind": head.kind, **found}
    return out
