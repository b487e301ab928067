"""The head kinds whose answer is a set of labels: multilabel (a sigmoid and a threshold
per label) and hierarchical (label paths, every node a label, decided top-down). Needs
numpy only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import DataError
from .kind import Kind, Reading, _sorted
from .labels import (
    LABEL_SETS,
    SCALAR_LABELS,
    check_path_sep,
    expand_paths,
    label_sets,
    parent_index,
)
from .thresholds import tune_thresholds as tune_label_thresholds

__all__ = ["HIERARCHICAL", "MULTILABEL", "Hierarchical", "Multilabel"]


class Multilabel(Kind):
    """A set of labels per text: a sigmoid and a threshold per label."""

    is_set = True
    label_word = "label set"
    answer_field = "labels"
    indicator_targets = True
    _member: Any = SCALAR_LABELS  # the type of one label of a set
    _members = "labels"  # what a set holds, in messages

    def check_label(self, head: str, i: int, label: Any) -> None:
        ok = isinstance(label, str) or (
            isinstance(label, LABEL_SETS) and all(isinstance(v, self._member) for v in label)
        )
        if not ok:
            raise DataError(
                f"head {head!r}: label #{i} is {label!r}; a {self} head takes a list "
                f"of {self._members} per text"
            )

    def distinct(self, labels: Sequence[Any]) -> list[Any]:
        seen = (v for labs in labels for v in ([labs] if isinstance(labs, str) else labs))
        return list(dict.fromkeys(seen))

    def label_key(self, label: Any) -> Any:
        return tuple(sorted(map(str, label)))

    def strata(self, labels: Sequence[Any]) -> list[str] | None:
        return None

    def check_stored_labels(self, labels: list[Any], path_sep: Any) -> str | None:
        if len(labels) < 1:
            raise DataError(f"a {self} head needs at least 1 labels, got {len(labels)}")
        return None

    def n_thresholds(self, n_labels: int) -> int:
        return n_labels

    def sets(self, labels: list[Any], how: Reading) -> list[list[Any]]:
        """The labels as one list per text (an absent row: none)."""
        try:
            return self._nodes(
                label_sets([v if p else [] for v, p in zip(labels, how.present, strict=True)]),
                how.path_sep,
            )
        except DataError as exc:
            raise DataError(f"{how.where}{exc}") from None

    def _nodes(self, sets: list[list[Any]], path_sep: str) -> list[list[Any]]:
        """Each text's labels as its targets mark them."""
        return sets

    def learn_classes(self, labels: list[Any], how: Reading) -> list[Any]:
        sets = self.sets(labels, how)
        classes = _sorted({v for labs in sets for v in labs}, how.where)
        if not classes:
            raise DataError(f"{how.where}{self} targets contain no label at all")
        return classes

    def encode_labels(self, labels: list[Any], classes: Sequence[Any], how: Reading) -> np.ndarray:
        index = {c: i for i, c in enumerate(classes)}
        sets = self.sets(labels, how)
        y = np.zeros((len(sets), len(index)), dtype=np.float32)
        for i, labs in enumerate(sets):
            y[i, [index[v] for v in labs if v in index]] = 1.0
        return y

    def known_rows(self, labels: Sequence[Any], classes: Sequence[Any]) -> tuple[list[int], list]:
        known = set(classes)
        return list(range(len(labels))), [[v for v in labs if v in known] for labs in labels]

    def held_out(self, labels: list[Any], classes: Sequence[Any]) -> tuple[list[Any], bool]:
        return self.known_rows(labels, classes)[1], False

    def unseen(self, labels: Sequence[Any], known: set[Any], path_sep: str) -> list[Any]:
        return sorted({lab for labs in labels for lab in labs} - known)

    def decide(
        self, proba: np.ndarray, thresholds: np.ndarray | None, parents: np.ndarray | None
    ) -> np.ndarray:
        return (proba >= thresholds).astype(np.int64)

    def predicted(self, picked: np.ndarray, classes: np.ndarray) -> np.ndarray:
        return picked  # a 0/1 row per text

    def decisions(self, labels: Sequence[Any], picked: np.ndarray) -> list[Any]:
        return [[lab for lab, on in zip(labels, row, strict=True) if on] for row in picked]

    def answers(
        self, labels: Sequence[Any], picked: np.ndarray, rounded: np.ndarray
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"labels": []} for _ in range(len(picked))]
        rows, cols = np.nonzero(picked)  # row by row, each row's labels in label order
        for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
            out[row]["labels"].append(labels[col])
        return out

    def blank_answer(self) -> dict[str, Any]:
        return {"labels": []}

    def thresholded(self, proba: np.ndarray) -> np.ndarray | None:
        return proba

    def tune_thresholds(self, proba: np.ndarray, target: np.ndarray, objective: str) -> Any:
        return tune_label_thresholds(proba, target, objective)

    def carry_thresholds(
        self, old: np.ndarray, old_classes: list[Any], classes: list[Any]
    ) -> np.ndarray | None:
        kept = dict(zip(old_classes, old.tolist(), strict=True))
        return np.array([kept.get(c, 0.5) for c in classes], dtype=np.float32)

    def calibration_pairs(
        self, proba: np.ndarray, y_true: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(proba, 1 - proba), (proba >= 0.5) == (y_true > 0)

    def reliability_pairs(
        self, proba: np.ndarray, target: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return proba.ravel(), target.ravel() > 0

    def scored_labels(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray | None:
        return None

    def label_columns(self, n_labels: int) -> np.ndarray | None:
        return None


class Hierarchical(Multilabel):
    """A set of label paths per text (``"role::program"`` is in ``"role"``): every node
    of a path is a label, decided top-down."""

    uses_paths = True
    indicator_targets = False
    soft_targets = False
    _member = str
    _members = "label paths (text)"

    def check_path_sep(self, path_sep: Any) -> None:
        check_path_sep(path_sep)

    def check_paths(
        self, labels: Sequence[Any], path_sep: str, where: Callable[[int], str]
    ) -> None:
        for i, paths in enumerate(labels):
            expand_paths(paths, path_sep, where(i))

    def parents(self, labels: Sequence[Any], path_sep: str | None) -> np.ndarray | None:
        assert path_sep is not None
        return parent_index(labels, path_sep)

    def record_fields(self, path_sep: str) -> dict[str, Any]:
        return {"path_sep": path_sep}

    def check_stored_labels(self, labels: list[Any], path_sep: Any) -> str | None:
        super().check_stored_labels(labels, path_sep)
        try:
            sep = check_path_sep(path_sep)
        except ValueError as exc:
            raise DataError(f"hierarchical head: {exc}") from None
        if not all(isinstance(v, str) for v in labels):
            raise DataError("a hierarchical head's labels are paths (text)")
        parent_index(labels, sep)  # every label's parent is a label too
        return sep

    def _nodes(self, sets: list[list[Any]], path_sep: str) -> list[list[Any]]:
        return [expand_paths(labs, path_sep) for labs in sets]

    def held_out(self, labels: list[Any], classes: Sequence[Any]) -> tuple[list[Any], bool]:
        return labels, False  # unknown nodes of a path are left out by encode

    def unseen(self, labels: Sequence[Any], known: set[Any], path_sep: str) -> list[Any]:
        return sorted({n for paths in labels for n in expand_paths(paths, path_sep)} - known)

    def decide(
        self, proba: np.ndarray, thresholds: np.ndarray | None, parents: np.ndarray | None
    ) -> np.ndarray:
        hits = proba >= thresholds
        if parents is not None:
            children = np.flatnonzero(parents >= 0)
            while True:  # a level deeper each pass, until no child is dropped
                kept = hits[:, children] & hits[:, parents[children]]
                if np.array_equal(kept, hits[:, children]):
                    break
                hits[:, children] = kept
        return hits.astype(np.int64)


MULTILABEL = Multilabel("multilabel")
HIERARCHICAL = Hierarchical("hierarchical")
