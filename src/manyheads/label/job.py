"""Labelling a big file (or a folder of them) into one output file: streamed, resumable,
every bad row kept aside with its reason.

The input is read a part at a time (``part_rows`` rows); each part is answered and
written beside the output, in ``OUTPUT.parts/``, as its own file, then marked done; a
small record of the job (``job.json``: the bundle, its heads, the input files, every
option that changes the output) says what the parts belong to. Each part's record
holds the SHA-256 of the input bytes it was read from (hashed as they are read, no
extra pass), so a part whose input was edited in place since is answered again. Only
when every part is done are they joined into the output (and the bad rows into
``OUTPUT.errors.jsonl``), written beside it and renamed into place; the job's record
is kept beside the output (``OUTPUT.job.json``, with the counts) and the parts
removed. A job interrupted at
any point (Ctrl-C, ``kill -9``, a power cut) and run again with the same command
answers the parts that are not done and gives the same bytes an uninterrupted run
gives; run again once it is done, it is already done (nothing is read or written); a
run that differs in bundle, heads, input or options is refused rather than mixed
with the old parts or output (``restart`` starts over). Memory stays at a few parts
whatever the size of the input.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

from .._io import atomic_write_bytes, atomic_write_text, describe_os_error, remove_stale_temps
from .._progress import progress_bar
from .._text import loads_json
from ..bundle import Bundle
from ..data.tables import check_file, format_of, input_files
from ..errors import ConfigError, DataError, positive_int, require
from .formats import Columns, arrow_schema
from .parts import Part, answered, join_parts, read_parts
from .rows import Labeller, LabelSettings

__all__ = [
    "JOB_FILE", "JobFolder", "LabelSettings", "LabelSummary", "LocalJob", "fingerprint",
    "job_record", "label_file", "mixed_job_message", "start_job",
]  # fmt: skip

JOB_FILE = "job.json"
DONE_SUFFIX = ".job.json"  # OUTPUT.job.json: the record of the job that wrote OUTPUT


@dataclass(frozen=True)
class LabelSummary:
    """What :func:`label_file` did: rows written (bad ones included), bad rows, parts
    answered now and found done from an earlier run, seconds, and where it wrote.
    ``answered_rows``: the rows of the parts answered now (``rows_per_second`` counts
    these); ``stale_parts``: parts found done whose input bytes had changed since,
    answered again; ``already_done``: the output was there, written by this same job,
    so nothing was done."""

    rows: int
    bad_rows: int
    parts: int
    resumed_parts: int
    seconds: float
    output: Path | str  # str: a URI (the ray engine)
    errors: Path | str | None
    answered_rows: int | None = None  # None: all of ``rows``
    stale_parts: int = 0
    already_done: bool = False

    @property
    def rows_per_second(self) -> float:
        rows = self.rows if self.answered_rows is None else self.answered_rows
        return rows / self.seconds if self.seconds > 0 else 0.0


HEAD_BYTES = 1 << 16  # an input file's first bytes, hashed into the job's record


def fingerprint(file: str, size: int, mtime_ns: int | None, head: bytes) -> dict[str, Any]:
    """What identifies an input file: its name, size, change time and first bytes."""
    return {
        "file": file, "size": size, "mtime_ns": mtime_ns,
        "head": hashlib.sha256(head[:HEAD_BYTES]).hexdigest(),
    }  # fmt: skip


def _fingerprint(path: Path) -> dict[str, Any]:
    stat = path.stat()
    with open(path, "rb") as fh:
        return fingerprint(str(path), stat.st_size, stat.st_mtime_ns, fh.read(HEAD_BYTES))


def job_record(
    bundle: Bundle, heads: list[str], inputs: list[dict[str, Any]], options: dict[str, Any]
) -> dict[str, Any]:
    """What a job's output depends on: the bundle (its folder, generation, trunk), the
    heads, the input files (``inputs``: each one's name, size, change time and first
    64 KiB) and the options."""
    return {
        "bundle": {
            "folder": str(bundle.path),
            "generation": bundle.generation,
            "trunk": bundle.trunk_fingerprint,
        },
        "heads": heads,
        "inputs": inputs,
        "options": options,
    }


def _which_differ(found: Any, job: dict[str, Any]) -> str:
    """``its bundle, heads differ``: what of ``job`` a ``found`` record does not match."""
    keys = sorted(k for k in job if not isinstance(found, dict) or found.get(k) != job[k])
    return f"its {', '.join(keys) or 'record'} {'differ' if len(keys) > 1 else 'differs'}"


def mixed_job_message(found: Any, job: dict[str, Any]) -> str:
    """The one-line message refusing to mix ``job`` with the parts of ``found``."""
    return (
        f"holds the parts of another job ({_which_differ(found, job)}): run "
        "the same command again to finish that one, or {restart} to start over"
    )


def done_record(output: Path) -> Path:
    """Where the record of the job that wrote ``output`` is kept: ``OUTPUT.job.json``."""
    return output.with_name(output.name + DONE_SUFFIX)


def _read_json(path: Path) -> Any:
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class JobFolder(Protocol):
    """Where a job keeps its parts and its record, as :func:`start_job` asks of it:
    ``shown`` (named in messages), ``clear`` (start over: the parts and the outputs
    gone), ``record`` (the job record's bytes; None when there is none), ``taken`` (the
    message refusing a place that holds something no job of this kind wrote; None when
    it is free) and ``create`` (the folder made, with the record in it)."""

    @property
    def shown(self) -> str: ...

    def clear(self) -> None: ...

    def record(self) -> bytes | None: ...

    def taken(self) -> str | None: ...

    def create(self, record: bytes) -> None: ...


@dataclass(frozen=True)
class LocalJob:
    """The job folder of :func:`label_file`: the parts in ``work`` beside the ``output``
    file (and its ``errors`` file)."""

    work: Path
    output: Path
    errors: Path

    @property
    def shown(self) -> str:
        return str(self.work)

    def clear(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        for path in (self.output, self.errors, done_record(self.output)):
            path.unlink(missing_ok=True)

    def record(self) -> bytes | None:
        path = self.work / JOB_FILE
        if not path.is_file():
            return None
        try:
            return path.read_bytes()
        except OSError:
            return b""

    def taken(self) -> str | None:
        if not self.output.exists():
            return None
        return (
            f"{self.output} exists and no labelling job wrote it: give another output, or "
            "{restart} to replace it"
        )

    def create(self, record: bytes) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.work / JOB_FILE, record)


def start_job(folder: JobFolder, job: dict[str, Any], restart: bool) -> bool:
    """Make ``folder`` ready for ``job`` (emptied first when ``restart``); True when it
    already held this job's parts. Refuses the parts of another job, and a place this
    job did not write."""
    if restart:
        folder.clear()
    text = folder.record()
    if text is not None:
        try:
            found = loads_json(text.decode("utf-8"))
        except ValueError:
            found = None
        if found != job:
            raise ConfigError(
                f"{folder.shown} {mixed_job_message(found, job)}", options=("restart",)
            )
        return True
    taken = folder.taken()
    if taken is not None:
        raise ConfigError(taken, options=("restart",))
    folder.create((json.dumps(job, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return False


def _already_done(output: Path, work: Path, job: dict[str, Any]) -> dict[str, Any] | None:
    """The counts of ``output`` when this same job wrote it; None when it has to run
    (no output yet, or the parts of an unfinished run). Refuses an output another job
    wrote."""
    if work.exists() or not output.is_file():
        return None
    found = _read_json(done_record(output))
    if not isinstance(found, dict) or not isinstance(found.get("counts"), dict):
        return None  # not a job's output: start_job says so
    if found.get("job") != job:
        raise ConfigError(
            f"{output} was written by another job ({_which_differ(found.get('job'), job)}): "
            "give another output, or {restart} to label again",
            options=("restart",),
        )
    counts: dict[str, Any] = found["counts"]
    return counts


def label_file(
    input_path: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    settings: LabelSettings | None = None,
    *,
    workers: int = 1,
    part_rows: int = 4096,
    progress: bool = False,
    on_part: Callable[[int], None] | None = None,
    **options: Any,
) -> LabelSummary:
    """Label the rows of ``input_path`` (a JSONL, JSONL.gz, CSV, TSV or Parquet file, or a
    folder of them, each a part) with the heads of ``bundle_path`` into ``output`` (its
    format from its name unless ``output_format`` says): see the module's text for how
    it streams and resumes, :mod:`manyheads.label.formats` for the columns written.

    A bad row (its text missing, not text, empty, over ``max_chars`` unless
    ``long_texts="window"``, not valid Unicode; a line that is no JSON object) gets no
    answer, stays in the output and goes to ``OUTPUT.errors.jsonl`` with its row
    number, file, id (``id_field``) and reason. ``workers`` > 1 answers parts in that
    many processes (each loads the bundle once): for trunks that do not use every core.
    ``on_part``: called with each part's number as it is done (a test's hook).
    ``settings`` (a :class:`LabelSettings`), with ``options`` (its fields, by name)
    over it: ``heads``, ``text_field``, ``id_field``, ``batch_size``,
    ``output_format``, ``input_format``, ``scores``, ``tier``, ``max_chars``,
    ``long_texts``, ``restart``, ``device`` (where the trunk runs: ``auto``, ``cpu``,
    ``cuda``, ``cuda:N``) and ``gpu_batch_size`` (texts a pass on a GPU, 16,384; the
    job then runs in one process, in parts of at least that many rows).
    """
    s = LabelSettings.merged(settings, options, "label_file")
    id_field, tier, restart = s.id_field, s.tier, s.restart
    started = time.perf_counter()
    output = Path(output)
    files = input_files(Path(input_path))
    out_fmt = format_of(output, s.output_format, option="output_format")
    if out_fmt == "parquet" and output.name.lower().endswith(".gz"):
        raise ConfigError(f"{output}: Parquet is compressed inside; name it .parquet")
    in_fmts = [format_of(f, s.input_format, option="input_format") for f in files]
    positive_int(workers, "workers")
    positive_int(part_rows, "part_rows")
    for file, fmt in zip(files, in_fmts, strict=True):
        check_file(file, fmt)  # a file no row of which can be read: before anything is written
    bundle = Bundle.load(bundle_path, cache=None, tier=tier, device=s.device)
    names = bundle.resolve_heads(s.heads)
    labeller = Labeller.of(bundle, tuple(names), s)
    if bundle.trunk.device.accelerated:
        # one process feeds the GPU, a pass of gpu_batch_size texts at a time
        workers, part_rows = 1, max(part_rows, labeller.batch_size)
    work = output.with_name(output.name + ".parts")
    errors = output.with_name(output.name + ".errors.jsonl")
    job = job_record(
        bundle,
        names,
        [_fingerprint(f) for f in files],
        {**s.rows(), "output_format": out_fmt, "input_formats": in_fmts, "part_rows": part_rows},
    )
    done_before = None if restart else _already_done(output, work, job)
    if done_before is not None:
        return LabelSummary(
            rows=int(done_before.get("rows", 0)), bad_rows=int(done_before.get("bad", 0)),
            parts=0, resumed_parts=0, seconds=time.perf_counter() - started, output=output,
            errors=errors if errors.is_file() else None, answered_rows=0, already_done=True,
        )  # fmt: skip
    resumed = False
    try:
        resumed = start_job(LocalJob(work, output, errors), job, restart)
        run = _run_parts(
            work, files, in_fmts, labeller, out_fmt, part_rows, id_field, progress,
            workers=workers, bundle_path=bundle_path, tier=tier, on_part=on_part,
        )  # fmt: skip
        for name in (output.name, errors.name, done_record(output).name):
            remove_stale_temps(output.parent, only=name)  # left by a run killed mid-write
        join_parts(work, run.parts, run.columns, out_fmt, output, errors)
        counts = {"rows": run.rows, "bad": run.bad}
        atomic_write_text(done_record(output), json.dumps({"job": job, "counts": counts}) + "\n")
        shutil.rmtree(work, ignore_errors=True)
    except OSError as exc:
        raise DataError(f"cannot label into {output}: {describe_os_error(exc)}") from None
    finally:
        if not resumed and work.is_dir() and not any(work.glob("part-*.done")):
            shutil.rmtree(work, ignore_errors=True)  # a job that never got going leaves nothing
    return LabelSummary(
        rows=run.rows,
        bad_rows=run.bad,
        parts=run.parts - run.found_done,
        resumed_parts=run.found_done if resumed else 0,
        seconds=time.perf_counter() - started,
        output=output,
        errors=errors if run.bad else None,
        answered_rows=run.answered_rows,
        stale_parts=run.stale,
    )


@dataclass
class _Run:
    """What answering a job's parts found: its parts, those found done (and, of the
    parts found done, those whose input had changed), rows, bad rows, rows answered."""

    columns: Columns
    parts: int = 0
    found_done: int = 0
    stale: int = 0
    rows: int = 0
    bad: int = 0
    answered_rows: int = 0


def _done(work: Path, part: Part) -> dict[str, Any] | None:
    """The record of ``part`` when an earlier run answered it from the same input bytes."""
    found = _read_json(work / part.done_name)
    if isinstance(found, dict) and found.get("digest") == part.chunk.digest:
        return found
    return None


def _run_parts(
    work: Path,
    files: list[Path],
    in_fmts: list[str],
    labeller: Labeller,
    out_fmt: str,
    part_rows: int,
    id_field: str | None,
    progress: bool,
    **engine: Any,
) -> _Run:
    """Answer the parts of the input that are not done (in ``work``), in order."""
    on_part = engine.pop("on_part", None)
    remove_stale_temps(work)  # left by a run killed mid-write
    parts = read_parts(files, in_fmts, part_rows, id_field)
    first = next(parts, None)
    run = _Run(_columns(first, labeller, out_fmt))

    def todo() -> Iterator[Part]:
        for part in chain([] if first is None else [first], parts):
            run.parts += 1
            found = _done(work, part)
            if found is not None:
                run.found_done += 1
                run.rows, run.bad = run.rows + found["rows"], run.bad + found["bad"]
                bar.update(len(part.chunk.rows))
                continue
            if (work / part.done_name).exists():
                run.stale += 1  # its input bytes changed since it was answered
                (work / part.done_name).unlink()
            yield part

    estimate = _estimate_rows(files, in_fmts, first)
    with progress_bar(total=estimate, desc="labelling", enabled=progress, unit="rows") as bar:
        for part, (body, bad, n_bad) in answered(todo(), labeller, run.columns, out_fmt, **engine):
            atomic_write_bytes(work / part.out_name, body)
            atomic_write_bytes(work / part.errors_name, bad)
            rows = len(part.chunk.rows)
            done = {"rows": rows, "bad": n_bad, "digest": part.chunk.digest}
            atomic_write_text(work / part.done_name, json.dumps(done) + "\n")
            run.rows, run.bad, run.answered_rows = (
                run.rows + rows,
                run.bad + n_bad,
                run.answered_rows + rows,
            )
            bar.update(rows)
            if on_part is not None:
                on_part(part.number)
    return run


def _columns(first: Part | None, labeller: Labeller, fmt: str) -> Columns:
    """The output's columns: the input's, in the order its first part shows them, then
    each head's (and, for Parquet, their types)."""
    rows = [] if first is None else [r for r in first.chunk.rows if isinstance(r, dict)]
    inputs = list(dict.fromkeys(k for r in rows for k in r if k not in labeller.heads))
    columns = labeller.columns(inputs)
    if fmt == "parquet":
        columns.schema = arrow_schema(columns, rows)
    return columns


def _estimate_rows(files: list[Path], formats: list[str], first: Part | None) -> int | None:
    """About how many rows the input holds (for the progress bar's ETA): exact for
    Parquet, else from the size of the files and of the first part's rows."""
    if first is None:
        return 0
    if all(f == "parquet" for f in formats):
        pq = require("pyarrow.parquet", "parquet")
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    sample = [r for r in first.chunk.rows if isinstance(r, dict)]
    if not sample:
        return None
    per_row = sum(len(json.dumps(r, ensure_ascii=False)) + 1 for r in sample) / len(sample)
    total = sum(f.stat().st_size for f in files)
    if any(f.name.lower().endswith(".gz") for f in files):
        total *= 4  # a guess at what gzip saved
    return max(len(first.chunk.rows), int(total / per_row))
