"""Absorbing the classifiers a team already runs into one bundle.

Every teacher (:mod:`manyheads.absorb.teachers`) answers the same unlabelled texts once
(cached); each becomes a head of one bundle, trained on its teacher's answers softened by
a temperature (:func:`soften`) and calibrated like any head. With ``finetune`` the
bundle's transformer is first fine-tuned on every teacher's answers at once (LP-FT, one
multi-task loss, a teacher's logits through an auxiliary layer): N fine-tuned models
merged into one trunk. The texts are split three ways: the heads (and the fine-tuning)
learn from the first part, are calibrated on the second and measured on the third
(agreement with their teachers), never on a text they learnt from.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._settings import Rule, Settings, number
from ..data import check_groups, split_indices
from ..errors import ConfigError, DataError
from ..heads.kinds import kind_of
from ..heads.settings import HEAD_RULES
from ..trunks.base import check_texts
from .measure import agreement, label_scores, student_labels, texts_per_second
from .teachers import AnswersTeacher, Teacher, TeacherAnswers, bundle_bytes, probabilities

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..train import HeadSummary
    from ..train.lpft import FinetuneReport

__all__ = ["AbsorbReport", "AbsorbSettings", "HeadReport", "absorb_teachers", "soften"]

DEFAULT_TEMPERATURE = 2.0


@dataclass
class HeadReport:
    """One absorbed head: its teacher, its agreement with it on held-out texts, and (with
    gold labels) the accuracy / macro-F1 of student and teacher side by side."""

    name: str
    source: str
    kind: str
    labels: int
    agreement: float
    heldout: int
    summary: HeadSummary
    student: dict[str, float] | None = None
    teacher: dict[str, float] | None = None
    teacher_bytes: int | None = None


@dataclass
class AbsorbReport:
    """What :func:`absorb_teachers` did and measured."""

    heads: list[HeadReport]
    texts: int
    skipped_empty: int
    duplicates: int
    split: dict[str, int]
    temperature: float
    bundle_bytes: int
    teachers_bytes: int | None
    speed: dict[str, float] = field(default_factory=dict)
    finetune: FinetuneReport | None = None
    seconds: float = 0.0


def soften(teacher: Teacher, answers: TeacherAnswers, temperature: float) -> np.ndarray:
    """A teacher's answers softened by ``temperature`` (from its logits when it has
    them, else from the log of its probabilities)."""
    if answers.logits is not None:
        return probabilities(answers.logits, teacher.kind, temperature)
    p = np.clip(answers.probs.astype(np.float64), 1e-7, 1 - 1e-7)
    if kind_of(teacher.kind).exclusive:  # from softmax probabilities
        return probabilities(np.log(p), teacher.kind, temperature)
    return probabilities(np.log(p) - np.log1p(-p), teacher.kind, temperature)


def _distinct_texts(
    texts: Sequence[str], groups: Sequence[Any] | None
) -> tuple[list[str], list[Any] | None, int, int]:
    """Texts without empty ones and repeats (a text answered once), with their groups."""
    texts = check_texts(texts)
    if groups is not None:
        groups = check_groups(groups, len(texts), "the data")
    seen: set[str] = set()
    kept: list[int] = []
    empty = 0
    for i, text in enumerate(texts):
        if not text.strip():
            empty += 1
        elif text not in seen:
            seen.add(text)
            kept.append(i)
    duplicates = len(texts) - empty - len(kept)
    return (
        [texts[i] for i in kept],
        None if groups is None else [groups[i] for i in kept],
        empty,
        duplicates,
    )


def _three_way(
    n: int, groups: Sequence[Any] | None, heldout: float, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rest, test = split_indices(n, groups=groups, val_fraction=heldout, seed=seed)
    sub_groups = None if groups is None else [groups[i] for i in rest]
    train, val = split_indices(len(rest), groups=sub_groups, val_fraction=val_fraction, seed=seed)
    return rest[train], rest[val], test


_SHARE = Rule(lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 0.5,
              "in (0, 0.5)")  # fmt: skip


@dataclass(frozen=True)
class AbsorbSettings(Settings):
    """How :func:`absorb_teachers` absorbs (its options, described there), checked when
    made."""

    heldout: float = 0.1
    val_fraction: float = 0.15
    temperature: float = DEFAULT_TEMPERATURE
    C: float | str = "auto"
    part_weights: str = "auto"
    finetune: bool = False
    finetune_options: Mapping[str, Any] | None = None
    speed_texts: int = 1000
    seed: int = 0
    progress: bool = False

    _constraints: ClassVar[Mapping[str, Rule]] = {
        "heldout": _SHARE,
        "val_fraction": _SHARE,
        "temperature": number(0, 100, low_open=True, high_open=False),
        "C": HEAD_RULES["C"],
        "speed_texts": number(0, integer=True),
        "seed": HEAD_RULES["seed"],
    }


def absorb_teachers(
    bundle: Bundle,
    folder: str | Path,
    texts: Sequence[str],
    teachers: Sequence[Teacher],
    *,
    groups: Sequence[Any] | None = None,
    eval_texts: Sequence[str] | None = None,
    eval_labels: Mapping[str, Sequence[Any]] | None = None,
    settings: AbsorbSettings | None = None,
    **options: Any,
) -> AbsorbReport:
    """Absorb ``teachers`` into ``bundle`` as heads of their names, from ``texts``
    (unlabelled); save the bundle into ``folder`` and measure it against the teachers.

    ``heldout`` of the texts (grouped by ``groups`` when given) measure each head's
    agreement with its teacher and the speed of both; ``val_fraction`` of the rest
    calibrate the heads. ``temperature`` softens the teachers' answers the heads learn
    from. ``finetune``: fine-tune the bundle's transformer on every teacher's answers
    first (``finetune_options``: ``epochs``, ``max_length``, ``batch_size``, ``lr``, as
    :func:`~manyheads.train.lpft.finetune_transformer` takes them). ``eval_texts`` /
    ``eval_labels`` (gold labels by head name): accuracy and macro-F1 of each head and of
    its teacher, on the texts labelled for it (``None``: a text not labelled for that
    head). ``speed_texts``: held-out texts timed (0: no timing). ``settings`` (an
    :class:`AbsorbSettings`), with ``options`` (its fields, by name) over it: how.
    """
    s = AbsorbSettings.merged(settings, options, "absorb_teachers")
    heldout, val_fraction, temperature, seed = s.heldout, s.val_fraction, s.temperature, s.seed
    finetune, progress = s.finetune, s.progress
    started = time.perf_counter()
    folder = Path(folder)
    if not teachers:
        raise ConfigError("give at least one {teacher} NAME=SOURCE", options=("teacher",))
    names = [t.name for t in teachers]
    if len(set(names)) != len(names):
        raise ConfigError(f"{{teacher}} names must be unique, got {names}", options=("teacher",))
    if finetune:
        others = sorted(set(bundle.heads) - set(names))
        if others:
            raise ConfigError(
                f"{{finetune}} makes a new trunk, and the bundle has heads trained on the old "
                f"one ({', '.join(others)}): absorb into a new bundle",
                options=("finetune",),
            )
        from ..train.finetune import tuned_transformer

        tuned_transformer(bundle)  # a trunk without one transformer part: refused now
    texts, groups, empty, duplicates = _distinct_texts(texts, groups)
    if len(texts) < 20:
        raise DataError(f"absorbing needs at least 20 distinct non-empty texts, got {len(texts)}")
    train, val, test = _three_way(len(texts), groups, heldout, val_fraction, seed)
    cache = bundle.cache
    for t in teachers:
        t.run_on(bundle.device)  # the teachers answer where the bundle's trunk runs
    answers = {t.name: t.answer(texts, cache=cache, progress=progress) for t in teachers}
    hard = {t.name: t.decide(answers[t.name].probs) for t in teachers}
    soft = {t.name: soften(t, answers[t.name], temperature) for t in teachers}
    pick = _picker(texts)
    if bundle.trunk_needs_fit:  # fitted parts (tfidf's idf) first: fine-tuning keeps them
        bundle.fit_trunk(pick(train))
    tuned = None
    if finetune:
        tuned = _finetune(bundle, folder, teachers, pick(train), answers, soft, train,
                          temperature, dict(s.finetune_options or {}), seed, progress)  # fmt: skip
    if cache is not None:
        bundle.embed(pick(np.concatenate([train, val])), progress=progress)
    summaries = {}
    for t in teachers:
        labels = hard[t.name]
        summaries[t.name] = bundle.fit_head(
            t.name,
            pick(train),
            [labels[i] for i in train],
            kind=t.kind,
            val_texts=pick(val),
            val_labels=[labels[i] for i in val],
            refit=False,
            C=s.C,
            part_weights=s.part_weights,
            thresholds="accuracy",
            field=t.name,
            seed=seed,
            soft_targets=(t.labels, soft[t.name][train]),
        )
    bundle.save(folder)
    test_texts = pick(test)
    answered = bundle.predict(test_texts, heads=names)
    reports = []
    for t in teachers:
        got = student_labels(answered, t.name, t.kind)
        reports.append(
            HeadReport(
                name=t.name,
                source=t.source,
                kind=t.kind,
                labels=len(t.labels),
                agreement=agreement(t.kind, [hard[t.name][i] for i in test], got),
                heldout=len(test),
                summary=summaries[t.name],
                teacher_bytes=t.size_bytes(),
            )
        )
    if eval_texts is not None and eval_labels:
        _score_on_gold(bundle, teachers, reports, check_texts(eval_texts), eval_labels, cache)
    runnable = [t for t in teachers if t.runs_here]
    sizes = [t.size_bytes() for t in runnable]
    speed = {}
    if s.speed_texts > 0 and runnable:
        speed = _speed(folder, runnable, test_texts[: s.speed_texts])
    return AbsorbReport(
        heads=reports,
        texts=len(texts),
        skipped_empty=empty,
        duplicates=duplicates,
        split={"train": len(train), "validation": len(val), "heldout": len(test)},
        temperature=float(temperature),
        bundle_bytes=bundle_bytes(bundle, folder),
        teachers_bytes=sum(s for s in sizes if s is not None) if runnable else None,
        speed=speed,
        finetune=tuned,
        seconds=time.perf_counter() - started,
    )


def _picker(texts: list[str]) -> Any:
    def pick(rows: np.ndarray) -> list[str]:
        return [texts[i] for i in rows]

    return pick


def _finetune(
    bundle: Bundle,
    folder: Path,
    teachers: Sequence[Teacher],
    train_texts: list[str],
    answers: Mapping[str, TeacherAnswers],
    soft: Mapping[str, np.ndarray],
    train: np.ndarray,
    temperature: float,
    options: dict[str, Any],
    seed: int,
    progress: bool,
) -> FinetuneReport:
    """The bundle's transformer fine-tuned on every teacher's answers at once."""
    from ..train.finetune import tune_trunk
    from ..train.lpft import SoftTask

    unknown = sorted(set(options) - {"epochs", "max_length", "batch_size", "lr"})
    if unknown:
        raise ConfigError(f"unknown finetune option(s) {unknown}")
    soft_tasks = {}
    for t in teachers:
        logits = answers[t.name].logits
        soft_tasks[t.name] = SoftTask(
            kind=t.kind,
            probs=soft[t.name][train],
            logits=None if logits is None else logits[train],
            temperature=float(temperature),
        )
    report, trunk, spec = tune_trunk(
        bundle, train_texts, {}, folder, soft_tasks=soft_tasks, seed=seed, progress=progress,
        **options,
    )  # fmt: skip
    bundle.replace_trunk(trunk, spec)
    bundle.path = folder
    return report


def _score_on_gold(
    bundle: Bundle,
    teachers: Sequence[Teacher],
    reports: list[HeadReport],
    texts: list[str],
    gold: Mapping[str, Sequence[Any]],
    cache: Any,
) -> None:
    """Accuracy and macro-F1 of every head with gold labels, and of its teacher, on the
    texts labelled for it (a ``None`` label: not labelled for this head)."""
    answered = bundle.predict(texts, heads=[t.name for t in teachers if t.name in gold])
    for t, report in zip(teachers, reports, strict=True):
        if t.name not in gold:
            continue
        column = list(gold[t.name])
        if len(column) != len(texts):
            raise DataError(f"{t.name!r}: {len(texts)} texts but {len(column)} gold labels")
        rows = [i for i, label in enumerate(column) if label is not None]
        if not rows:
            continue
        truth = [column[i] for i in rows]
        student = student_labels([answered[i] for i in rows], t.name, t.kind)
        report.student = label_scores(t.kind, truth, student)
        mine = [texts[i] for i in rows]
        if isinstance(t, AnswersTeacher) and not t.covers(mine):
            continue  # the answers file does not answer the labelled texts
        report.teacher = label_scores(t.kind, truth, t.decide(t.answer(mine, cache=cache).probs))


def _speed(folder: Path, teachers: Sequence[Teacher], texts: list[str]) -> dict[str, float]:
    """Texts per second of the teachers run one after another vs the saved bundle (loaded
    afresh, no cache), on the same texts."""
    from ..bundle import Bundle

    fresh = Bundle.load(folder, cache=None)

    def run_teachers() -> None:
        for t in teachers:
            t.answer(texts)

    def run_bundle() -> None:
        fresh.predict(texts)

    warm = texts[:8]
    for t in teachers:  # models loaded before the clock starts
        t.answer(warm)
    fresh.predict(warm)
    teachers_rate = texts_per_second(run_teachers, len(texts))
    bundle_rate = texts_per_second(run_bundle, len(texts))
    return {
        "texts": float(len(texts)),
        "teachers_texts_per_s": teachers_rate,
        "bundle_texts_per_s": bundle_rate,
        "speedup": bundle_rate / teachers_rate if teachers_rate > 0 else float("inf"),
    }
