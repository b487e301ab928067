"""What absorbing measures: a head's agreement with its teacher, accuracy and macro-F1
against gold labels, and texts per second."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from ..heads.kinds import kind_of

__all__ = ["agreement", "label_scores", "student_labels", "texts_per_second"]


def student_labels(answers: Sequence[dict[str, Any]], name: str, kind: str) -> list[Any]:
    """One head's decisions out of :meth:`Bundle.predict`'s answers (a label, or a list of
    labels for a multilabel head)."""
    key = kind_of(kind).answer_field
    return [a[name][key] for a in answers]


def _sets(values: Sequence[Any]) -> list[frozenset[str]]:
    return [frozenset(str(v) for v in value) for value in values]


def agreement(kind: str, teacher: Sequence[Any], student: Sequence[Any]) -> float:
    """The share of texts where the student answers what the teacher answers (the same
    label; for a multilabel head, the same set of labels)."""
    if not teacher:
        return float("nan")
    if kind_of(kind).is_set:
        same = [a == b for a, b in zip(_sets(teacher), _sets(student), strict=True)]
    else:
        same = [str(a) == str(b) for a, b in zip(teacher, student, strict=True)]
    return float(np.mean(same))


def label_scores(kind: str, gold: Sequence[Any], predicted: Sequence[Any]) -> dict[str, float]:
    """Accuracy (exact match for multilabel) and macro-F1 over the labels either side names."""
    n = len(gold)
    if kind_of(kind).is_set:
        binarizer = MultiLabelBinarizer().fit([*_sets(gold), *_sets(predicted)])
        y_true, y_pred = binarizer.transform(_sets(gold)), binarizer.transform(_sets(predicted))
        return {
            "n": float(n),
            "accuracy": agreement(kind, gold, predicted),
            "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        }
    truth, guess = [str(v) for v in gold], [str(v) for v in predicted]
    labels = sorted(set(truth) | set(guess))
    return {
        "n": float(n),
        "accuracy": agreement(kind, truth, guess),
        "macro_f1": float(f1_score(truth, guess, labels=labels, average="macro", zero_division=0)),
    }


def texts_per_second(run: Callable[[], None], n_texts: int) -> float:
    """Texts per second of one call of ``run`` over ``n_texts`` texts."""
    start = time.perf_counter()
    run()
    return n_texts / max(time.perf_counter() - start, 1e-9)
