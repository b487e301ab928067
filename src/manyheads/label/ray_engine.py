"""The labelling job on Ray Data: on this machine or on a cluster (``address``).

Each input file is read by one Ray read task with the project's one reader of tables
(:func:`~manyheads.data.tables.read_chunks_from`, the file opened through its pyarrow
file system), the same rows, row numbers and bad rows as the local engine, as blocks
(:func:`~manyheads.label.batch.chunk_block`: each row's fields, its number and its
problem; CSV cells are text); answered by :class:`~manyheads.label.batch.LabelBatch`
actors (``map_batches`` with an ``ActorPoolStrategy``: each actor loads the bundle
once), and written by Ray Data in the output format, with the same columns as the
local engine, into ``OUTPUT/<input file>/`` (Ray writes a folder of files per
dataset). The bad rows (their file, row number, id and reason, as the local engine
gives them) go to ``OUTPUT/errors.jsonl``. Arrow holds every row's fields in every
row (a field a row lacks is null) and only valid UTF-8 (a row's bytes that were not
UTF-8 are written as U+FFFD). A file whose output is done
is marked so (``OUTPUT/.done-<name>``): a run interrupted and started again with the
same command skips the files that are done; a run with another bundle, heads, input
or options is refused (``restart`` starts over).

Input and output are paths or URIs of any file system pyarrow knows (``s3://``,
``gs://``, ``hdfs://``, ``file://``): on a cluster they must be where every node reads
them, and every worker needs ``manyheads[ray]`` (and the bundle's own extras).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._text import one_line
from ..bundle import Bundle, bundle_folder
from ..data.tables import (
    check_stream,
    format_of,
    no_input,
    read_chunks_from,
    readable,
    suffix_format,
)
from ..errors import ConfigError, DataError, ManyheadsError, require
from ..trunks.device import device_name
from .batch import (
    ERROR_COLUMN,
    LINE_COLUMN,
    ROW_COLUMN,
    LabelBatch,
    chunk_block,
    conform,
    one_schema,
)
from .job import HEAD_BYTES, JOB_FILE, LabelSummary, fingerprint, job_record, start_job
from .rows import Labeller, LabelSettings  # checks every option before Ray starts

__all__ = ["label_with_ray", "output_format_of"]


@dataclass(frozen=True)
class _Place:
    """A file or folder on a pyarrow file system: ``fs`` and the ``path`` on it, shown to
    people as ``shown`` (what they gave)."""

    fs: Any
    path: str
    shown: str

    @classmethod
    def of(cls, given: str | os.PathLike[str]) -> _Place:
        fs_module = require("pyarrow.fs", "ray")
        text = os.fspath(given)
        if "://" not in text:
            return cls(fs_module.LocalFileSystem(), os.path.abspath(text), text)
        try:
            fs, path = fs_module.FileSystem.from_uri(text)
        except (ValueError, OSError) as err:
            raise ConfigError(f"cannot open {text}: {err}") from None
        return cls(fs, path, text)

    def child(self, name: str) -> _Place:
        return _Place(
            self.fs, f"{self.path.rstrip('/')}/{name}", f"{self.shown.rstrip('/')}/{name}"
        )

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def info(self) -> Any:
        return self.fs.get_file_info(self.path)

    def is_file(self) -> bool:
        return bool(self.info().type == require("pyarrow.fs", "ray").FileType.File)

    def open(self) -> Any:
        """The file, open for reading (seekable, as it is stored: no decompressing)."""
        try:
            return self.fs.open_input_file(self.path)
        except OSError as exc:
            raise DataError(f"cannot read {self.shown}: {one_line(exc)}") from None

    def read(self) -> bytes:
        with self.fs.open_input_stream(self.path, compression=None) as fh:
            return bytes(fh.read())

    def write(self, data: bytes) -> None:
        """Whole or not at all: written beside, then moved into place (on object storage
        an object appears whole anyway)."""
        temp = (
            f"{self.path.rsplit('/', 1)[0]}/.{self.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        with self.fs.open_output_stream(temp, compression=None) as fh:
            fh.write(data)
        self.fs.move(temp, self.path)

    def delete(self) -> None:
        if self.is_file():
            self.fs.delete_file(self.path)


def _inputs(place: _Place) -> list[_Place]:
    """The files to read: ``place`` itself, or the files of a folder (sorted by name,
    those :func:`~manyheads.label.formats.readable`)."""
    pafs = require("pyarrow.fs", "ray")
    info = place.info()
    if info.type == pafs.FileType.Directory:
        found = place.fs.get_file_info(pafs.FileSelector(place.path))
        names = sorted(i.base_name for i in found if i.type == pafs.FileType.File)
        files = [place.child(n) for n in names if readable(n)]
        if not files:
            raise no_input(place.shown, folder=True)
        return files
    if info.type != pafs.FileType.File:
        raise no_input(place.shown, folder=False)
    return [place]


def _fingerprint(place: _Place) -> dict[str, Any]:
    info = place.info()
    with place.fs.open_input_stream(place.path, compression=None) as fh:
        head = bytes(fh.read(HEAD_BYTES))
    return fingerprint(place.shown, int(info.size), info.mtime_ns, head)


@dataclass(frozen=True)
class _RayJob:
    """The job folder of :func:`label_with_ray`: the ``output`` folder itself, its
    record in it (a :class:`~manyheads.label.job.JobFolder`)."""

    output: _Place

    @property
    def shown(self) -> str:
        return self.output.shown

    def clear(self) -> None:
        self.output.fs.delete_dir_contents(self.output.path, missing_dir_ok=True)

    def record(self) -> bytes | None:
        record = self.output.child(JOB_FILE)
        return record.read() if record.is_file() else None

    def taken(self) -> str | None:
        pafs = require("pyarrow.fs", "ray")
        info = self.output.info()
        if info.type == pafs.FileType.File or (
            info.type == pafs.FileType.Directory
            and self.output.fs.get_file_info(pafs.FileSelector(self.output.path))
        ):
            return (
                f"{self.output.shown} exists and is not this job's folder: give another "
                "output, or {restart} to empty it"
            )
        return None

    def create(self, record: bytes) -> None:
        self.output.fs.create_dir(self.output.path)
        self.output.child(JOB_FILE).write(record)


BLOCK_ROWS = 4096  # the rows of a block a read task yields


def _check(place: _Place, fmt: str) -> None:
    """Refuse, before anything is started, a file no row of which can be read."""
    with place.open() as fh:
        check_stream(fh, fmt, place.shown)


def _blocks(place: _Place, fmt: str, text_field: str) -> Any:
    """The blocks of one input file (:func:`~manyheads.label.batch.chunk_block`), read
    with :func:`~manyheads.data.tables.read_chunks_from`, all of one schema (every
    column in every block, of one type), so the output's files agree: the file's rows
    are held whole, as Ray Data's own readers hold them."""
    with place.open() as fh:
        blocks = [
            chunk_block(chunk, place.shown, text_field)
            for chunk in read_chunks_from(fh, fmt, place.shown, BLOCK_ROWS)
        ]
    if blocks:
        schema = one_schema([b.schema for b in blocks], [ROW_COLUMN, ERROR_COLUMN], place.shown)
        yield from (b if b.schema == schema else conform(b, schema) for b in blocks)


def _read(ray: Any, place: _Place, fmt: str, text_field: str) -> Any:
    """A dataset of one input file, read by one read task (:func:`_blocks`)."""
    from dataclasses import fields

    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    names = {f.name for f in fields(BlockMetadata)}
    known = {"num_rows": None, "size_bytes": None, "exec_stats": None, "schema": None}
    metadata = BlockMetadata(
        **{k: v for k, v in known.items() if k in names}, input_files=(place.shown,)
    )

    class TablesDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(
            self,
            parallelism: int,
            per_task_row_limit: int | None = None,
            data_context: Any = None,
        ) -> list[Any]:
            limit = {} if per_task_row_limit is None else {"per_task_row_limit": per_task_row_limit}
            return [ReadTask(lambda: _blocks(place, fmt, text_field), metadata, **limit)]

    return ray.data.read_datasource(TablesDatasource(), override_num_blocks=1)


def _lines_sink(ray: Any, place: _Place) -> Any:
    """A Ray datasink writing the JSONL lines :class:`LabelBatch` made, as they are."""

    class LinesSink(ray.data.datasource.BlockBasedFileDatasink):
        def write_block_to_file(self, block: Any, file: Any) -> None:
            lines = block.to_arrow().column(LINE_COLUMN).to_pylist()
            file.write("".join(lines).encode("utf-8"))

    return LinesSink(place.path, filesystem=place.fs, file_format="jsonl")


def _write(ray: Any, dataset: Any, place: _Place, fmt: str) -> None:
    if fmt == "jsonl":
        dataset.write_datasink(_lines_sink(ray, place))
    elif fmt in ("csv", "tsv"):
        import pyarrow.csv as pacsv

        options = pacsv.WriteOptions(delimiter="\t") if fmt == "tsv" else None
        dataset.write_csv(
            place.path, filesystem=place.fs,
            arrow_csv_args_fn=lambda: {"write_options": options},
        )  # fmt: skip
    else:
        dataset.write_parquet(place.path, filesystem=place.fs)


def _run_file(run: Any, source: _Place) -> Any:
    """``run()`` (one input file's dataset, materialized); an error of manyheads raised in
    a Ray task (a file that breaks off, rows Arrow cannot hold) is raised here as its
    own one line, any other as one line naming the file, never Ray's traceback."""
    try:
        return run()
    except Exception as exc:  # Ray wraps a task's error in its own task errors
        cause = _root_cause(exc)
        if isinstance(cause, ManyheadsError):
            raise DataError(_first_line(cause)) from None
        raise DataError(f"cannot label {source.shown} on Ray: {_first_line(cause)}") from None


def _root_cause(exc: BaseException) -> BaseException:
    """The error under Ray's wrappers (``cause`` of a task error)."""
    seen: set[int] = set()
    cause = exc
    while id(cause) not in seen:
        seen.add(id(cause))
        inner = getattr(cause, "cause", None)
        inner = inner if isinstance(inner, BaseException) else cause.__cause__
        if inner is None:
            break
        cause = inner
    return cause


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def output_format_of(output: str | os.PathLike[str], output_format: str | None) -> str:
    """The format of the ray engine's output, a folder of parts: ``output_format``, else
    what the folder's name says (``out.parquet/``), else JSONL."""
    if output_format is not None:
        return format_of(os.fspath(output), output_format, option="output_format")
    return suffix_format(Path(os.fspath(output).rstrip("/")).name) or "jsonl"


def _shown(place: _Place) -> Path | str:
    return place.shown if "://" in place.shown else Path(place.shown)


def _bad_rows(answered: Any, file: str, id_field: str | None) -> list[str]:
    """The bad rows of one answered file as lines of the errors file (as the local
    engine writes them: file, row number, id, reason)."""
    lines = []
    from ray.data.expressions import col

    for row in answered.filter(expr=col(ERROR_COLUMN).is_not_null()).take_all():
        entry = {"file": file, "row": row[ROW_COLUMN]}
        if id_field is not None:  # JSONL: the row is inside its output line
            source = json.loads(row[LINE_COLUMN]) if LINE_COLUMN in row else row
            entry["id"] = source.get(id_field)
        entry["reason"] = row[ERROR_COLUMN]
        lines.append(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    return lines


def _gpus_for(device: str, seen: int) -> int:
    """The GPUs the actors use: those of the Ray cluster (``seen``) for ``device``
    ``auto`` or ``cuda``; none for ``cpu``. ``cuda`` on a cluster with none is refused."""
    name = device_name(device)  # checked here; the actors find their GPU themselves
    if name == "cpu":
        return 0
    if name != "auto" and not seen:
        text = str(device).strip().lower()
        raise ConfigError(f"{{device}} {text}: the Ray cluster has no GPU", options=("device",))
    return seen


def label_with_ray(
    input_path: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    settings: LabelSettings | None = None,
    *,
    address: str | None = None,
    workers: int | None = None,
    num_cpus: int | None = None,
    progress: bool = False,
    **options: Any,
) -> LabelSummary:
    """Label ``input_path`` into the folder ``output`` on Ray Data (see the module's
    text); ``workers``: the most actors (default: one per CPU Ray sees); ``num_cpus``: the
    CPUs of a local Ray started here; ``progress``: Ray Data's progress bars;
    ``settings`` / ``options``: as :func:`~manyheads.label.job.label_file`'s."""
    s = LabelSettings.merged(settings, options, "label_with_ray")
    ray = require("ray", "ray")
    started = time.perf_counter()
    out_fmt = output_format_of(output, s.output_format)
    if os.fspath(output).lower().endswith(".gz"):
        raise ConfigError(f"{output}: the ray engine writes plain files; drop the .gz")
    files = _inputs(_Place.of(input_path))
    formats = [format_of(f.name, s.input_format, option="input_format") for f in files]
    for file, fmt in zip(files, formats, strict=True):
        _check(file, fmt)  # a file no row of which can be read: before anything is written
    place = _Place.of(output)
    folder = bundle_folder(bundle_path, s.tier)  # the folder every actor loads
    bundle = Bundle.load(folder, cache=None, device="cpu")  # the actors run the trunk
    names = bundle.resolve_heads(s.heads)
    Labeller.of(bundle, tuple(names), s)  # its settings checked before anything is started
    # every actor loads the tier's folder itself and writes the output's format
    record = job_record(
        bundle, names, [_fingerprint(f) for f in files],
        {**s.rows(), "tier": None, "output_format": out_fmt},
    )  # fmt: skip
    start_job(_RayJob(place), record, s.restart)
    if not ray.is_initialized():
        ray.init(
            address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
            logging_level=logging.WARNING,
        )  # fmt: skip
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = progress
    resources = ray.cluster_resources()
    gpus = _gpus_for(s.device, int(resources.get("GPU", 0)))
    # on GPUs: one actor a GPU, asking for it, a pass of gpu_batch_size texts
    size = gpus or workers or max(1, int(resources.get("CPU", 1)))
    actors = s.replace(
        heads=names, tier=None, output_format=out_fmt, device="cuda" if gpus else "cpu"
    )
    rows = bad = resumed = answered_rows = 0
    for source, fmt in zip(files, formats, strict=True):
        done = place.child(f".done-{source.name}")
        resumed += done.is_file()
        if not done.is_file():
            target = place.child(source.name)
            target.fs.delete_dir_contents(target.path, missing_dir_ok=True)
            answered = _run_file(
                lambda source=source, fmt=fmt: (
                    _read(ray, source, fmt, s.text_field)
                    .map_batches(
                        LabelBatch,
                        fn_constructor_args=(str(folder), actors),
                        fn_constructor_kwargs={"threads": 1},  # an actor: 1 CPU
                        batch_size=s.gpu_batch_size if gpus else s.batch_size,
                        batch_format="pyarrow",
                        num_gpus=1 if gpus else None,
                        # from one actor up: a fixed pool as big as the CPUs would wait
                        # for CPUs the read tasks hold
                        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=size),
                    )
                    .materialize()
                ),
                source,
            )
            _write(ray, answered.drop_columns([ERROR_COLUMN, ROW_COLUMN]), target, out_fmt)
            failed = _bad_rows(answered, source.name, s.id_field)
            place.child(f".errors-{source.name}.jsonl").write("".join(failed).encode("utf-8"))
            counts = {"rows": answered.count(), "bad": len(failed)}
            done.write((json.dumps(counts) + "\n").encode("utf-8"))
            answered_rows += counts["rows"]
        counts = json.loads(done.read())
        rows, bad = rows + counts["rows"], bad + counts["bad"]
    errors = place.child("errors.jsonl")
    errors.delete()
    if bad:
        errors.write(b"".join(place.child(f".errors-{f.name}.jsonl").read() for f in files))
    return LabelSummary(
        rows=rows,
        bad_rows=bad,
        parts=len(files) - resumed,
        resumed_parts=resumed,
        answered_rows=answered_rows,
        seconds=time.perf_counter() - started,
        output=_shown(place),
        errors=_shown(errors) if bad else None,
    )
