"""Judging trunks for tasks, and teachers for sharing trunks, before training anything:
what is measured once texts are vectors.

A trunk diagnosis draws a sample of labelled texts (:meth:`TrunkSample.draw`); each
trunk's vectors of it are scored on each task (the scores of
:mod:`manyheads.evaluate.separability`) and the trunks ranked per task by the linear
probe (:func:`rank_trunks`). Encoding the sample with each trunk is
:func:`manyheads.absorb.diagnose.diagnose_trunks`'s. :func:`diagnose_teachers` compares
teachers' features on the same texts (:mod:`manyheads.evaluate.compatibility`) and
suggests which could share one trunk.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from .._progress import progress_bar
from ..data import split_indices
from ..errors import ConfigError, DataError, one_of, positive_int
from ..heads.kinds import KINDS, kind_of
from .compatibility import GROUP_THRESHOLD, gromov_wasserstein, group_teachers, linear_cka
from .separability import discordance, knn_accuracy, linear_probe, span_coordinates

__all__ = [
    "DIAGNOSE_K",
    "DIAGNOSE_SAMPLE",
    "PROBE_TEST_FRACTION",
    "RANK_BY",
    "TEACHER_SAMPLE",
    "FeatureSource",
    "TaskDiagnosis",
    "TeacherDiagnosis",
    "TrunkDiagnosis",
    "TrunkSample",
    "TrunkScores",
    "check_settings",
    "diagnose_teachers",
    "rank_trunks",
]

DIAGNOSE_SAMPLE = 1500  # rows of the file a trunk diagnosis reads
DIAGNOSE_K = 10  # neighbours of the kNN accuracy and the discordance
PROBE_TEST_FRACTION = 0.3  # of the sample, held out (by group) to score the probe
TEACHER_SAMPLE = 500  # texts the teachers are compared on (Gromov-Wasserstein is cubic)
MIN_SAMPLE = 20
CANDIDATES = 30  # same-label and other-label candidates of the discordance (at least k)
# What orders the trunks of a task: the probe's test accuracy (the same kind of model
# as a linear head, on a held-out part); then kNN accuracy, then the discordance.
RANK_BY = ("probe", "knn", "discordance")


class FeatureSource(Protocol):
    """What :func:`diagnose_teachers` asks of a teacher
    (:class:`manyheads.absorb.teachers.Teacher` is one)."""

    name: str

    def features(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class TrunkScores:
    """One trunk on one task: ``probe`` (test accuracy of a logistic regression;
    exact match for label sets), ``knn`` (leave-one-out kNN accuracy),
    ``discordance`` (0.5 chance, 1 perfect) and the probe's ``C``."""

    trunk: str
    probe: float
    knn: float
    discordance: float
    probe_C: float


@dataclass(frozen=True)
class TaskDiagnosis:
    """One task: its ``kind``, its distinct labels (label sets for a list-per-item
    task) in the sample, the commonest one's share (what answering it always scores),
    and every trunk's scores, the best first."""

    name: str
    kind: str
    labels: int
    majority: float
    scores: list[TrunkScores]

    @property
    def ranking(self) -> list[str]:
        return [s.trunk for s in self.scores]


@dataclass(frozen=True)
class TrunkDiagnosis:
    """The trunks judged on each task: the sample's size, the probe's train / test
    split, each trunk's width and seconds (fitting and encoding), the settings."""

    tasks: dict[str, TaskDiagnosis]
    trunks: list[str]
    n: int
    n_train: int
    n_test: int
    dims: dict[str, int]
    seconds: dict[str, float]
    k: int
    seed: int
    rank_by: tuple[str, ...] = RANK_BY
    subject: ClassVar[str] = "trunks"  # what is judged: the key of a report's data

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready); each task with its ``ranking``."""
        doc = asdict(self)
        doc["rank_by"] = list(self.rank_by)
        for name, task in self.tasks.items():
            doc["tasks"][name]["ranking"] = task.ranking
        return doc


@dataclass(frozen=True)
class TeacherDiagnosis:
    """Teachers compared on the same ``n`` texts: each one's feature width, linear CKA
    and Gromov-Wasserstein discrepancy of every pair (matrices in the order of
    ``names``), and the suggested groups at CKA ``threshold``."""

    names: list[str]
    dims: dict[str, int]
    n: int
    cka: list[list[float]]
    gw: list[list[float]]
    groups: list[list[str]]
    threshold: float
    seconds: dict[str, float] = field(default_factory=dict)
    subject: ClassVar[str] = "teachers"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sample(n: int, size: int, seed: int) -> np.ndarray:
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def _check_sample(sample: int) -> None:
    positive_int(sample, "sample")
    if sample < MIN_SAMPLE:
        raise ConfigError(
            f"{{sample}} must be at least {MIN_SAMPLE}, got {sample}", options=("sample",)
        )


def check_settings(sample: int, k: int, seed: int) -> None:
    """The sample size (at least :data:`MIN_SAMPLE`), ``k`` (below it) and the seed."""
    _check_sample(sample)
    positive_int(k, "k")
    if k >= sample:
        raise ConfigError(
            f"{{k}} must be smaller than {{sample}} ({sample}), got {k}", options=("k", "sample")
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"{{seed}} must be an integer, got {seed!r}", options=("seed",))


def _task_labels(name: str, kind: str, labels: Sequence[Any], rows: np.ndarray) -> list[Any]:
    """The task's labels of the sampled rows, checked: two labels at least, and some
    label on two rows."""
    picked = [labels[i] for i in rows]
    found = kind_of(kind)
    keys = [found.label_key(v) for v in picked]
    counts = np.unique(np.asarray([repr(key) for key in keys]), return_counts=True)[1]
    what = f"{found.label_word}s"
    if len(counts) < 2:
        raise DataError(f"task {name!r} has one of its {what} only in the {len(rows)} rows read")
    if counts.max() < 2:
        raise DataError(
            f"task {name!r}: every one of its {what} has a single row in the {len(rows)} rows "
            "read; give more rows (or a larger sample)"
        )
    return picked


@dataclass(frozen=True)
class TrunkSample:
    """The rows a trunk diagnosis judges on: their ``texts``, ``groups`` and each task's
    ``(kind, labels)``, the probe's ``train`` / ``test`` split of them (a fitted trunk
    part learns from ``train``), ``k`` and ``seed``."""

    texts: list[str]
    groups: list[Any] | None
    tasks: dict[str, tuple[str, list[Any]]]
    train: np.ndarray
    test: np.ndarray
    k: int
    seed: int

    @classmethod
    def draw(
        cls,
        texts: Sequence[str],
        tasks: Mapping[str, tuple[str, Sequence[Any]]],
        groups: Sequence[Any] | None,
        sample: int,
        k: int,
        seed: int,
    ) -> TrunkSample:
        """``sample`` rows of ``texts`` drawn at random (``seed``), each task's labels
        checked, :data:`PROBE_TEST_FRACTION` of the rows (whole ``groups`` when given)
        held out to score the probe. ``sample``, ``k`` and ``seed`` as
        :func:`check_settings` passes them."""
        texts = list(texts)
        if not tasks:
            raise ConfigError("give at least one {task}", options=("task",))
        for name, (kind, labels) in tasks.items():
            one_of(kind, tuple(KINDS), "kind")
            if len(labels) != len(texts):
                raise DataError(f"task {name!r}: {len(texts)} texts but {len(labels)} labels")
        if groups is not None and len(groups) != len(texts):
            raise DataError(f"{len(texts)} texts but {len(groups)} groups")
        rows = _sample(len(texts), sample, seed)
        if len(rows) < MIN_SAMPLE:
            raise DataError(f"need at least {MIN_SAMPLE} rows to diagnose, got {len(rows)}")
        if k >= len(rows):
            raise ConfigError(
                f"{{k}} must be smaller than the rows read ({len(rows)}), got {k}", options=("k",)
            )
        picked = {
            n: (kind, _task_labels(n, kind, labels, rows)) for n, (kind, labels) in tasks.items()
        }
        sample_groups = None if groups is None else [groups[i] for i in rows]
        train, test = split_indices(
            len(rows), groups=sample_groups, val_fraction=PROBE_TEST_FRACTION, seed=seed
        )
        return cls([texts[i] for i in rows], sample_groups, picked, train, test, k, seed)

    @property
    def train_texts(self) -> list[str]:
        """The texts a trunk's fitted parts learn from (the probe's train part)."""
        return [self.texts[i] for i in self.train]


def _scores(trunk: str, X: Any, kind: str, labels: list[Any], drawn: TrunkSample) -> TrunkScores:
    k, seed, groups = drawn.k, drawn.seed, drawn.groups
    probe = linear_probe(X, labels, kind=kind, split=(drawn.train, drawn.test), seed=seed)
    return TrunkScores(
        trunk=trunk,
        probe=probe.accuracy,
        knn=knn_accuracy(X, labels, kind=kind, k=k, groups=groups),
        discordance=discordance(
            X, labels, kind=kind, k=k, candidates=max(CANDIDATES, k), groups=groups, seed=seed
        ),
        probe_C=probe.C,
    )


def rank_trunks(
    drawn: TrunkSample,
    vectors: Mapping[str, Any],
    seconds: Mapping[str, float],
    *,
    progress: bool = False,
) -> TrunkDiagnosis:
    """Each trunk's ``vectors`` of ``drawn.texts`` (``{trunk: n × d}``, in the order the
    trunks are listed; ``seconds``: what encoding took) scored on every task, as their
    coordinates in the span of the sample when the trunk is wider than the sample is
    long (the same inner products, sooner;
    :func:`~manyheads.evaluate.separability.span_coordinates`): the linear probe
    (:func:`~manyheads.evaluate.separability.linear_probe`), kNN accuracy and the
    discordance, neighbours and candidates never from an item's own group. The trunks
    of a task are ranked by :data:`RANK_BY`."""
    names = list(vectors)
    dims = {name: int(X.shape[1]) for name, X in vectors.items()}
    spans = {name: span_coordinates(X) for name, X in vectors.items()}
    results: dict[str, TaskDiagnosis] = {}
    with progress_bar(total=len(drawn.tasks) * len(names), desc="scoring", enabled=progress) as bar:
        for task, (kind, labels) in drawn.tasks.items():
            scores = []
            for name in names:
                try:
                    scores.append(_scores(name, spans[name], kind, labels, drawn))
                except DataError as exc:
                    raise DataError(f"task {task!r}: {exc}") from None
                bar.update()
            order = {name: i for i, name in enumerate(names)}
            scores.sort(key=lambda s: (*(-getattr(s, key) for key in RANK_BY), order[s.trunk]))
            keys = [repr(kind_of(kind).label_key(v)) for v in labels]
            _, counts = np.unique(np.asarray(keys), return_counts=True)
            results[task] = TaskDiagnosis(
                name=task,
                kind=kind,
                labels=len(counts),
                majority=float(counts.max() / len(keys)),
                scores=scores,
            )
    return TrunkDiagnosis(
        tasks=results, trunks=names, n=len(drawn.texts), n_train=len(drawn.train),
        n_test=len(drawn.test), dims=dims, seconds=dict(seconds), k=drawn.k, seed=drawn.seed,
    )  # fmt: skip


def _features(teacher: FeatureSource, texts: list[str]) -> np.ndarray:
    got = teacher.features(texts)
    F = np.asarray(got.toarray() if hasattr(got, "toarray") else got, dtype=np.float64)
    if F.ndim != 2 or F.shape[0] != len(texts) or not np.isfinite(F).all():
        raise DataError(
            f"teacher {teacher.name!r} gave features of shape {F.shape} "
            f"(finite: {bool(np.isfinite(F).all())}); expected {len(texts)} finite rows"
        )
    return F


def diagnose_teachers(
    texts: Sequence[str],
    teachers: Sequence[FeatureSource],
    *,
    sample: int = TEACHER_SAMPLE,
    seed: int = 0,
    threshold: float = GROUP_THRESHOLD,
) -> TeacherDiagnosis:
    """Compare ``teachers`` on a sample of ``texts`` (``sample`` drawn at random,
    ``seed``): each gives its features (what its classifier layer sees); every pair
    gets its linear CKA and Gromov-Wasserstein discrepancy, and the teachers are
    grouped at CKA ``threshold`` (:func:`~manyheads.evaluate.compatibility.group_teachers`):
    the teachers of one group see their texts alike, so one trunk may serve them all.
    """
    _check_sample(sample)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ConfigError(
            f"{{threshold}} must be a number, got {threshold!r}", options=("threshold",)
        )
    if not 0 < threshold <= 1:
        raise ConfigError(
            f"{{threshold}} must be in (0, 1], got {threshold!r}", options=("threshold",)
        )
    names = [t.name for t in teachers]
    if len(names) < 2:
        raise ConfigError(
            f"give at least two teachers ({{teacher}}) to compare, got {len(names)}",
            options=("teacher",),
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"{{teacher}} names must be distinct, got {names}", options=("teacher",))
    texts = list(texts)
    rows = _sample(len(texts), sample, seed)
    if len(rows) < MIN_SAMPLE:
        raise DataError(f"need at least {MIN_SAMPLE} texts to compare teachers, got {len(rows)}")
    picked = [texts[i] for i in rows]
    features: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    for teacher in teachers:
        start = time.perf_counter()
        features[teacher.name] = _features(teacher, picked)
        seconds[teacher.name] = time.perf_counter() - start
    size = len(names)
    cka, gw = np.eye(size), np.zeros((size, size))
    for a in range(size):
        for b in range(a + 1, size):
            try:
                X, Y = features[names[a]], features[names[b]]
                cka[a, b] = cka[b, a] = linear_cka(X, Y)
                gw[a, b] = gw[b, a] = gromov_wasserstein(X, Y)
            except DataError as exc:  # "X" / "Y" named as the teachers
                raise DataError(f"teachers {names[a]!r} and {names[b]!r}: {exc}") from None
    return TeacherDiagnosis(
        names=names,
        dims={n: int(F.shape[1]) for n, F in features.items()},
        n=len(picked),
        cka=cka.round(6).tolist(),
        gw=gw.round(6).tolist(),
        groups=group_teachers(names, cka, threshold),
        threshold=float(threshold),
        seconds=seconds,
    )
