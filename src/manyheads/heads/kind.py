"""Head kinds as objects: what a kind means, asked of one object instead of tested by
name. A :class:`Kind` is its own name (a ``str``: stored, compared and printed as
``"multiclass"``), and it answers what the rest of the package once branched on:
whether its answer is a set, which labels it takes, its targets, its probabilities and
decisions, the shape of its answers, its thresholds and its loss.

This module holds the base class and the single-label kinds; ``kind_sets`` the kinds
whose answer is a set; ``kinds.KINDS`` maps each name to its kind (a new kind is a
subclass and one ``kinds.register`` call). Needs numpy only (scipy and the
calibration are imported by the methods that calibrate; torch is handed in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from .labels import PATH_SEP, SCALAR_LABELS
from .thresholds import tune_binary_threshold

__all__ = [
    "ABSENT",
    "BINARY",
    "MULTICLASS",
    "Binary",
    "Kind",
    "Multiclass",
    "Reading",
    "sigmoid",
    "softmax",
]

ABSENT = -100  # the class index of a row without a label (torch's ignore_index)
Link = Callable[[np.ndarray], np.ndarray]  # logits to probabilities, element- or row-wise


@dataclass(frozen=True)
class Reading:
    """How labels are read as targets: ``present``, the rows that have a label;
    ``path_sep``, what separates a label path's parts; ``where``, what prefixes a
    message; ``unseen``, the class index of a single label outside the classes (None:
    such a label is an error)."""

    present: np.ndarray
    path_sep: str = PATH_SEP
    where: str = ""
    unseen: int | None = None


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow warnings."""
    return np.exp(-np.logaddexp(0, -z))


def _sorted(values: set[Any], where: str) -> list[Any]:
    try:
        return sorted(values)
    except TypeError as exc:
        raise DataError(f"{where}labels must be of one comparable type ({exc})") from None


class Kind(str):
    """A head kind. Subclasses set the flags and override what differs; the defaults
    are a single-label kind's (one label per text, class indices as targets)."""

    is_set = False  # the answer is a set of labels (a 0/1 row per text)
    exclusive = False  # one class of many: softmax, the most probable, no thresholds
    single_logit = False  # one output for two classes (the positive one's)
    uses_paths = False  # labels are paths, and every node of a path is a label
    soft_targets = True  # a teacher's probabilities can train it (distillation)
    label_word = "label"  # what one text's answer is: a label, a label set
    answer_field = "label"  # the field of an answer holding the decision
    indicator_targets = False  # an estimator also takes a 0/1 matrix as its targets
    open_classes = False  # a correction may name a new class (learnt at the next update)

    @property
    def name(self) -> str:
        return str.__str__(self)

    # -- labels ----------------------------------------------------------------

    def check_label(self, head: str, i: int, label: Any) -> None:
        """A :class:`DataError` when ``label`` (text #``i``) is not one this kind takes."""
        if not isinstance(label, SCALAR_LABELS):
            raise DataError(
                f"head {head!r}: label #{i} is {label!r}; a {self} head takes one label "
                "(a string or number) per text"
                + ("; use kind 'multilabel' for lists" if isinstance(label, list) else "")
            )

    def distinct(self, labels: Sequence[Any]) -> list[Any]:
        """The distinct labels of training labels, in first-seen order."""
        return list(dict.fromkeys(labels))

    def label_key(self, label: Any) -> Any:
        """One text's label as a value to count and compare (a set: its sorted texts)."""
        return label

    def strata(self, labels: Sequence[Any]) -> list[str] | None:
        """What a split stratifies on (None: not stratified)."""
        return [str(v) for v in labels]

    def check_path_sep(self, path_sep: Any) -> None:
        """Refuse a bad path separator where this kind reads paths."""

    def check_paths(
        self, labels: Sequence[Any], path_sep: str, where: Callable[[int], str]
    ) -> None:
        """Read every label path (``where(i)`` prefixes the message of text #``i``)."""

    def parents(self, labels: Sequence[Any], path_sep: str | None) -> np.ndarray | None:
        """Each label's parent index (-1: a root); None where labels have no parents."""
        return None

    def record_fields(self, path_sep: str) -> dict[str, Any]:
        """The fields a head of this kind adds to its stored record."""
        return {}

    def check_stored_labels(self, labels: list[Any], path_sep: Any) -> str | None:
        """A stored record's labels judged (a :class:`DataError`); its path separator
        (None where the kind has none)."""
        if len(labels) < 2:
            raise DataError(f"a {self} head needs at least 2 labels, got {len(labels)}")
        return None

    # -- outputs and thresholds ------------------------------------------------

    def n_outputs(self, n_labels: int) -> int:
        """Outputs of a head's last layer."""
        return 1 if self.single_logit else n_labels

    def n_thresholds(self, n_labels: int) -> int:
        """Thresholds an estimator holds (one per label for a set)."""
        return 1

    def stored_thresholds(self, n_labels: int) -> int | None:
        """Thresholds a record stores (None: it stores none)."""
        return None if self.exclusive else self.n_thresholds(n_labels)

    def flat_logits(self, z: np.ndarray) -> np.ndarray:
        """The logits as a head's decision function gives them (one logit: flattened)."""
        return z

    def output_classes(self, classes: list[Any]) -> list[Any]:
        """The classes the outputs stand for, in order."""
        return classes

    def output_columns(self, proba: np.ndarray) -> np.ndarray:
        """The columns of probabilities (one per label) the outputs stand for."""
        return proba

    def layer_target(self, y: np.ndarray) -> np.ndarray:
        """Encoded targets as a torch-trained layer's outputs take them."""
        return y

    def soft_target(self, columns: np.ndarray) -> np.ndarray:
        """A teacher's probabilities of :meth:`output_classes` as a training target."""
        return columns

    # -- targets (heads.targets) -----------------------------------------------

    def learn_classes(self, labels: list[Any], how: Reading) -> list[Any]:
        """The classes of training labels."""
        classes = _sorted({v for v, p in zip(labels, how.present, strict=True) if p}, how.where)
        if len(classes) < 2:
            only = classes[0] if classes else None
            raise DataError(
                f"{how.where}labels have a single class ({only!r}); a classifier needs at least two"
            )
        return classes

    def encode_labels(self, labels: list[Any], classes: Sequence[Any], how: Reading) -> np.ndarray:
        """Targets of ``labels`` against ``classes``: class indices (``ABSENT`` where a
        row has no label; a label outside ``classes`` is ``how.unseen``, or an error
        when it is None) or, for a set, a 0/1 float32 matrix (a label outside is left
        out)."""
        index = {c: i for i, c in enumerate(classes)}
        idx = np.full(len(labels), ABSENT, dtype=np.int64)
        for i, (v, p) in enumerate(zip(labels, how.present, strict=True)):
            if p:
                k = index.get(v)
                if k is None:
                    if how.unseen is None:
                        raise DataError(f"{how.where}label {v!r} was not seen in training")
                    k = how.unseen
                idx[i] = k
        return idx

    def known_rows(self, labels: Sequence[Any], classes: Sequence[Any]) -> tuple[list[int], list]:
        """``(rows, labels)`` without what a head fitted on ``classes`` never saw."""
        known = set(classes)
        rows = [i for i, v in enumerate(labels) if v in known]
        return rows, [labels[i] for i in rows]

    def held_out(self, labels: list[Any], classes: Sequence[Any]) -> tuple[list[Any], bool]:
        """Held-out labels as they are scored: ``(labels, unseen)``, ``unseen`` when a
        label the head never saw counts as an error."""
        return labels, True

    def unseen(self, labels: Sequence[Any], known: set[Any], path_sep: str) -> list[Any]:
        """The labels of held-out ``labels`` outside ``known``, sorted."""
        return sorted({v for v in labels if v not in known}, key=str)

    # -- probabilities, decisions, answers (heads.decode) ----------------------

    def activate(self, z: np.ndarray, soft: Link = softmax, sig: Link = sigmoid) -> np.ndarray:
        """Probabilities from temperature-scaled logits (``soft``, ``sig``: the softmax
        and the sigmoid to use)."""
        return sig(z)

    def decide(
        self, proba: np.ndarray, thresholds: np.ndarray | None, parents: np.ndarray | None
    ) -> np.ndarray:
        """Each row's pick: a class index."""
        return np.argmax(proba, axis=1)

    def predicted(self, picked: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """An estimator's predictions from :meth:`decide`'s picks: the labels."""
        return classes[picked]

    def decisions(self, labels: Sequence[Any], picked: np.ndarray) -> list[Any]:
        """:meth:`decide`'s picks as labels: one per row (a set: a list per row)."""
        return [labels[k] for k in picked]

    def answers(
        self, labels: Sequence[Any], picked: np.ndarray, rounded: np.ndarray
    ) -> list[dict[str, Any]]:
        """Each row's answer without its scores (``picked``: :meth:`decide`'s picks;
        ``rounded``: the probabilities, rounded)."""
        best = rounded[np.arange(len(picked)), picked].tolist()
        return [
            {"label": labels[k], "score": s} for k, s in zip(picked.tolist(), best, strict=True)
        ]

    def blank_answer(self) -> dict[str, Any]:
        """The answer to an empty text: no label."""
        return {"label": None, "score": None}

    def thresholded(self, proba: np.ndarray) -> np.ndarray | None:
        """The probabilities the thresholds apply to (None: no thresholds)."""
        return None

    # -- calibration -----------------------------------------------------------

    def nll(self, logits: np.ndarray, y: np.ndarray) -> Callable[[float], float]:
        """The validation negative log-likelihood at a log-temperature."""
        rows = self.row_nll(logits, y)
        return lambda log_t: float(rows(log_t).mean())

    def row_nll(self, logits: np.ndarray, y: np.ndarray) -> Callable[[float], np.ndarray]:
        """Each validation row's negative log-likelihood at a log-temperature (here the
        mean over the row's outputs, so the rows' mean is :meth:`nll`)."""
        from scipy.special import log_expit

        z = np.asarray(logits, dtype=np.float64)
        t = np.asarray(y, dtype=np.float64).reshape(z.shape)

        def rows(log_t: float) -> np.ndarray:
            s = z / np.exp(log_t)
            loss = -(t * log_expit(s) + (1 - t) * log_expit(-s))
            return loss.reshape(len(z), -1).mean(axis=1)

        return rows

    def tune_thresholds(self, proba: np.ndarray, target: np.ndarray, objective: str) -> Any:
        """Thresholds tuned on validation rows (``proba``: the sigmoid of each output,
        ``target``: the encoded targets); None where the kind has none."""
        return None

    def carry_thresholds(
        self, old: np.ndarray, old_classes: list[Any], classes: list[Any]
    ) -> np.ndarray | None:
        """Thresholds kept over a refit that may change the classes (None: keep the
        refit's)."""
        return None

    def calibration_pairs(
        self, proba: np.ndarray, y_true: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(confidence, right)`` for the expected calibration error: the top label's."""
        return proba.max(axis=1), np.argmax(proba, axis=1) == y_true

    def reliability_pairs(
        self, proba: np.ndarray, target: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(probability, right)`` pairs a reliability diagram bins."""
        return self.calibration_pairs(proba, target)

    def scored_labels(self, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray | None:
        """The labels F1 averages over (None: every column of a 0/1 matrix)."""
        return np.unique(np.concatenate([y_true, y_pred]))

    def label_columns(self, n_labels: int) -> np.ndarray | None:
        """The labels a per-label F1 scores (None: every column of a 0/1 matrix)."""
        return np.arange(n_labels)

    # -- training (torch) ------------------------------------------------------

    def target_dtype(self) -> Any:
        """The dtype of a torch-trained layer's targets."""
        return np.float32

    def loss(self, f: Any, logits: Any, target: Any, class_weight: Any, pos_weight: Any) -> Any:
        """The mean loss of ``logits`` against ``target`` (``f``: torch.nn.functional)."""
        return f.binary_cross_entropy_with_logits(logits, target, pos_weight=pos_weight)

    def distil_loss(self, f: Any, z: Any, target: Any) -> Any:
        """The mean loss of softened ``z`` against a teacher's probabilities."""
        return f.binary_cross_entropy_with_logits(z, target)


class Multiclass(Kind):
    """One class of many per text: softmax, the most probable class."""

    exclusive = True
    open_classes = True

    def activate(self, z: np.ndarray, soft: Link = softmax, sig: Link = sigmoid) -> np.ndarray:
        return soft(z)

    def soft_target(self, columns: np.ndarray) -> np.ndarray:
        return columns / np.maximum(columns.sum(axis=1, keepdims=True), 1e-12)

    def row_nll(self, logits: np.ndarray, y: np.ndarray) -> Callable[[float], np.ndarray]:
        from scipy.special import log_softmax

        z = np.asarray(logits, dtype=np.float64)
        idx = np.asarray(y, dtype=np.int64)
        at = np.arange(len(idx))

        def rows(log_t: float) -> np.ndarray:
            return -log_softmax(z / np.exp(log_t), axis=1)[at, idx]

        return rows

    def target_dtype(self) -> Any:
        return np.int64

    def loss(self, f: Any, logits: Any, target: Any, class_weight: Any, pos_weight: Any) -> Any:
        return f.cross_entropy(logits, target, weight=class_weight)

    def distil_loss(self, f: Any, z: Any, target: Any) -> Any:
        return -(target * f.log_softmax(z, dim=1)).sum(dim=1).mean()


class Binary(Kind):
    """One of two classes per text: one logit, the positive class when it reaches its
    threshold."""

    single_logit = True

    def check_stored_labels(self, labels: list[Any], path_sep: Any) -> str | None:
        super().check_stored_labels(labels, path_sep)
        if len(labels) != 2:
            raise DataError(f"a binary head has exactly 2 labels, got {len(labels)}")
        return None

    def learn_classes(self, labels: list[Any], how: Reading) -> list[Any]:
        classes = super().learn_classes(labels, how)
        if len(classes) != 2:
            raise DataError(
                f"{how.where}a binary head needs exactly 2 classes, "
                f"got {len(classes)}: {classes[:10]}"
            )
        return classes

    def flat_logits(self, z: np.ndarray) -> np.ndarray:
        return z[:, 0]

    def output_classes(self, classes: list[Any]) -> list[Any]:
        return classes[1:]

    def output_columns(self, proba: np.ndarray) -> np.ndarray:
        return proba[:, 1:2]

    def layer_target(self, y: np.ndarray) -> np.ndarray:
        return y.astype(np.float32)[:, None]  # one sigmoid output: the positive class

    def activate(self, z: np.ndarray, soft: Link = softmax, sig: Link = sigmoid) -> np.ndarray:
        p = sig(z).reshape(-1)
        return np.stack([1 - p, p], axis=1)

    def decide(
        self, proba: np.ndarray, thresholds: np.ndarray | None, parents: np.ndarray | None
    ) -> np.ndarray:
        assert thresholds is not None
        return (proba[:, 1] >= thresholds[0]).astype(np.int64)

    def thresholded(self, proba: np.ndarray) -> np.ndarray | None:
        return proba[:, 1:2]

    def tune_thresholds(self, proba: np.ndarray, target: np.ndarray, objective: str) -> Any:
        return np.array([tune_binary_threshold(proba, target, objective)], dtype=np.float32)

    def carry_thresholds(
        self, old: np.ndarray, old_classes: list[Any], classes: list[Any]
    ) -> np.ndarray | None:
        return np.array([float(old[0])], dtype=np.float32)

    def loss(self, f: Any, logits: Any, target: Any, class_weight: Any, pos_weight: Any) -> Any:
        z = logits.reshape(-1) if logits.ndim == 2 else logits
        per_row = f.binary_cross_entropy_with_logits(
            z, target.reshape(-1).to(z.dtype), reduction="none"
        )
        if class_weight is None:
            return per_row.mean()
        w = class_weight[target.reshape(-1).long()]
        return (per_row * w).sum() / w.sum()


MULTICLASS = Multiclass("multiclass")
BINARY = Binary("binary")
