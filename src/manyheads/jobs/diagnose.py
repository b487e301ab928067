"""Judging trunks for a file's tasks, or teachers for sharing trunks, before training:
the job behind ``manyheads diagnose``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import read_texts
from ..errors import ConfigError
from ..trunks import load_trunk
from .options import TaskSpec, cache_setting, read_tasks, task_specs

if TYPE_CHECKING:
    from ..absorb.diagnose import FeatureSource

__all__ = ["diagnose_file"]


def _mode(
    tasks: Sequence[Any], trunks: Sequence[str], teachers: Sequence[Any], given: dict[str, Any]
) -> str:
    """``trunks`` or ``teachers``, the options checked against it."""
    if tasks and teachers:
        raise ConfigError(
            "give tasks ({task}) to rank trunks for, or teachers ({teacher}) to compare, not both",
            options=("task", "teacher"),
        )
    if teachers:
        for name in ("trunk", "group_field", "k"):
            if given[name]:
                raise ConfigError(
                    f"{{{name}}} is for ranking trunks on tasks ({{task}}), not for comparing "
                    "teachers ({teacher})",
                    options=(name, "task", "teacher"),
                )
        return "teachers"
    if not tasks:
        raise ConfigError(
            "give a task ({task}) to rank trunks for, or teachers ({teacher}) to compare",
            options=("task", "teacher"),
        )
    if given["threshold"]:
        raise ConfigError(
            "{threshold} groups teachers ({teacher}); it is not for ranking trunks on tasks "
            "({task})",
            options=("threshold", "teacher", "task"),
        )
    if not trunks:
        raise ConfigError("give at least one {trunk} to judge", options=("trunk",))
    return "trunks"


def diagnose_file(
    data: str | Path,
    *,
    tasks: Sequence[str | TaskSpec] = (),
    trunks: Sequence[str] = (),
    teachers: Sequence[str | FeatureSource] = (),
    text_field: str = "text",
    group_field: str | None = None,
    label_sep: str = ",",
    sample: int | None = None,
    k: int | None = None,
    seed: int = 0,
    threshold: float | None = None,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    report: str | Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Diagnose from a file, as plain data: ``{"mode": "trunks", ...}`` (the
    :class:`~manyheads.absorb.diagnose.TrunkDiagnosis` as a dict: per task, each
    trunk's scores and the ranking) or ``{"mode": "teachers", ...}`` (the
    :class:`~manyheads.absorb.diagnose.TeacherDiagnosis`).

    Trunks: ``tasks`` (``NAME[=FIELD][:KIND]``, as ``train`` names them) read from
    ``data`` with their labels, ``trunks`` judged on a ``sample`` of the rows (default
    1,500), ``k`` neighbours (10), rows sharing ``group_field`` kept apart. Teachers:
    ``teachers`` (``NAME=SOURCE``, as :func:`manyheads.absorb.teachers.load_teacher`
    reads them, or teacher objects) compared on a ``sample`` of ``data``'s texts
    (default 500), grouped at CKA ``threshold`` (0.8). ``report``: a folder for
    ``report.html`` / ``report.json``. Every option is checked before the file is read.
    """
    given = {"trunk": bool(trunks), "group_field": group_field is not None,
             "k": k is not None, "threshold": threshold is not None}  # fmt: skip
    mode = _mode(tasks, trunks, teachers, given)
    # imported here: the command line starts without the absorbing code
    from ..absorb.diagnose import (
        DIAGNOSE_K,
        DIAGNOSE_SAMPLE,
        TEACHER_SAMPLE,
        check_settings,
        diagnose_teachers,
        diagnose_trunks,
    )
    from ..evaluate.compatibility import GROUP_THRESHOLD

    if mode == "teachers":
        from ..absorb.teachers import load_teacher, parse_teacher

        size = TEACHER_SAMPLE if sample is None else sample
        check_settings(size, 1, seed)
        parsed = [t if not isinstance(t, str) else parse_teacher(t) for t in teachers]
        names = [p.name if not isinstance(p, tuple) else p[0] for p in parsed]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"{{teacher}} names must be distinct, got {names}", options=("teacher",)
            )
        if len(names) < 2:
            raise ConfigError(
                f"give at least two teachers ({{teacher}}) to compare, got {len(names)}",
                options=("teacher",),
            )
        sources = [load_teacher(*p) if isinstance(p, tuple) else p for p in parsed]
        texts = read_texts(data, text_field)
        result: Any = diagnose_teachers(
            texts, sources, sample=size, seed=seed,
            threshold=GROUP_THRESHOLD if threshold is None else threshold,
        )  # fmt: skip
    else:
        size = DIAGNOSE_SAMPLE if sample is None else sample
        neighbours = DIAGNOSE_K if k is None else k
        check_settings(size, neighbours, seed)
        specs = task_specs(tasks)
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ConfigError(f"{{task}} names must be distinct, got {names}", options=("task",))
        if len(set(trunks)) != len(trunks):
            raise ConfigError(
                f"{{trunk}} names must be distinct, got {list(trunks)}", options=("trunk",)
            )
        built = {name: load_trunk(name) for name in trunks}  # an unknown name: before reading
        dataset = read_tasks(data, specs, text_field, group_field, label_sep)
        result = diagnose_trunks(
            dataset.texts, {s.name: (s.kind, dataset.labels[s.name]) for s in specs},
            built, groups=dataset.groups, sample=size, k=neighbours, seed=seed,
            cache=cache_setting(cache_dir, no_cache), progress=progress,
        )  # fmt: skip
    if report is not None:
        from ..absorb.diagnose_report import write_diagnosis_report

        write_diagnosis_report(report, result)
    return {"mode": mode, **result.as_dict()}
