"""Judging trunks for a file's tasks, or teachers for sharing trunks, before training:
the job behind ``manyheads diagnose``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .._settings import Rule, boolean
from ..data import read_texts
from ..errors import ConfigError
from ..trunks import load_trunk
from .file_settings import FILE_RULES, POSITIVE, FileSettings
from .options import TaskSpec, task_specs

if TYPE_CHECKING:
    from ..evaluate.diagnosis import FeatureSource

__all__ = ["DiagnoseSettings", "diagnose_file"]


def _share(value: Any) -> bool:
    """None, or a number in (0, 1]."""
    real = isinstance(value, int | float) and not isinstance(value, bool)
    return value is None or (real and 0 < value <= 1)


@dataclass(frozen=True)
class DiagnoseSettings(FileSettings):
    """How :func:`diagnose_file` reads its file and judges (its options, described
    there), each checked when the object is made; ``None``: the mode's default."""

    sample: int | None = None
    k: int | None = None
    seed: int = 0
    threshold: float | None = None
    report: str | Path | None = None
    progress: bool = False

    _constraints: ClassVar[Mapping[str, Rule]] = {
        **FILE_RULES,
        "sample": POSITIVE,
        "k": POSITIVE,
        "seed": Rule(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
        "threshold": Rule(_share, "in (0, 1]"),
        "progress": boolean(),
    }


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
    settings: DiagnoseSettings | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Diagnose from a file, as plain data: ``{"mode": "trunks", ...}`` (the
    :class:`~manyheads.evaluate.diagnosis.TrunkDiagnosis` as a dict: per task, each
    trunk's scores and the ranking) or ``{"mode": "teachers", ...}`` (the
    :class:`~manyheads.evaluate.diagnosis.TeacherDiagnosis`).

    Trunks: ``tasks`` (``NAME[=FIELD][:KIND]``, as ``train`` names them) read from
    ``data`` with their labels, ``trunks`` judged on a ``sample`` of the rows (default
    1,500), ``k`` neighbours (10), rows sharing ``group_field`` kept apart. Teachers:
    ``teachers`` (``NAME=SOURCE``, as :func:`manyheads.absorb.teachers.load_teacher`
    reads them, or teacher objects) compared on a ``sample`` of ``data``'s texts
    (default 500), grouped at CKA ``threshold`` (0.8). ``report``: a folder for
    ``report.html`` / ``report.json``. ``options`` (by name): the fields of
    :class:`DiagnoseSettings` (``text_field``, ``group_field``, ``label_sep``,
    ``cache_dir``, ``no_cache``, ``sample``, ``k``, ``seed``, ``threshold``,
    ``report``, ``progress``), over ``settings``. Every option is checked before the
    file is read.
    """
    job = DiagnoseSettings.merged(settings, options, "diagnose_file")
    given = {"trunk": bool(trunks), "group_field": job.group_field is not None,
             "k": job.k is not None, "threshold": job.threshold is not None}  # fmt: skip
    mode = _mode(tasks, trunks, teachers, given)
    result = (
        _teachers(data, teachers, job) if mode == "teachers" else _trunks(data, tasks, trunks, job)
    )
    if job.report is not None:
        from ..evaluate.diagnosis_report import write_diagnosis_report

        write_diagnosis_report(job.report, result)
    return {"mode": mode, **result.as_dict()}


def _teachers(
    data: str | Path, teachers: Sequence[str | FeatureSource], job: DiagnoseSettings
) -> Any:
    # imported here: the command line starts without the diagnosing code
    from ..absorb.teachers import load_teacher, parse_teacher
    from ..evaluate.compatibility import GROUP_THRESHOLD
    from ..evaluate.diagnosis import TEACHER_SAMPLE, check_settings, diagnose_teachers

    size = TEACHER_SAMPLE if job.sample is None else job.sample
    check_settings(size, 1, job.seed)
    parsed = [t if not isinstance(t, str) else parse_teacher(t) for t in teachers]
    names = [p.name if not isinstance(p, tuple) else p[0] for p in parsed]
    if len(set(names)) != len(names):
        raise ConfigError(f"{{teacher}} names must be distinct, got {names}", options=("teacher",))
    if len(names) < 2:
        raise ConfigError(
            f"give at least two teachers ({{teacher}}) to compare, got {len(names)}",
            options=("teacher",),
        )
    sources = [load_teacher(*p) if isinstance(p, tuple) else p for p in parsed]
    texts = read_texts(data, job.text_field)
    threshold = GROUP_THRESHOLD if job.threshold is None else job.threshold
    return diagnose_teachers(texts, sources, sample=size, seed=job.seed, threshold=threshold)


def _trunks(
    data: str | Path, tasks: Sequence[str | TaskSpec], trunks: Sequence[str], job: DiagnoseSettings
) -> Any:
    from ..absorb.diagnose import diagnose_trunks
    from ..evaluate.diagnosis import DIAGNOSE_K, DIAGNOSE_SAMPLE, check_settings

    size = DIAGNOSE_SAMPLE if job.sample is None else job.sample
    neighbours = DIAGNOSE_K if job.k is None else job.k
    check_settings(size, neighbours, job.seed)
    specs = task_specs(tasks)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{{task}} names must be distinct, got {names}", options=("task",))
    if len(set(trunks)) != len(trunks):
        raise ConfigError(
            f"{{trunk}} names must be distinct, got {list(trunks)}", options=("trunk",)
        )
    built = {name: load_trunk(name) for name in trunks}  # an unknown name: before reading
    dataset = job.read_tasks(data, specs)
    return diagnose_trunks(
        dataset.texts, {s.name: (s.kind, dataset.labels[s.name]) for s in specs},
        built, groups=dataset.groups, sample=size, k=neighbours, seed=job.seed,
        cache=job.cache(), progress=job.progress,
    )  # fmt: skip
