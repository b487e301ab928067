"""The parts of a labelling job: read (a chunk of rows of one input file), answered (its
output bytes and its bad rows), answered in other processes, joined into the output."""

from __future__ import annotations

import gzip
import json
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._io import atomic_open
from ..data.tables import Chunk, read_chunks
from ..errors import require
from .formats import Columns, header, render_part
from .rows import Labeller

__all__ = ["Part", "answer_part", "answered", "join_parts", "part_name", "read_parts"]


def part_name(number: int, what: str) -> str:
    """The file of part ``number`` holding ``what``: ``out``, ``errors.jsonl``, ``done``."""
    return f"part-{number:06d}.{what}"


@dataclass
class Part:
    """Rows ``chunk`` of input file ``file``, the ``number``-th part of the job."""

    number: int
    file: str
    chunk: Chunk
    id_field: str | None

    @property
    def out_name(self) -> str:
        return part_name(self.number, "out")

    @property
    def errors_name(self) -> str:
        return part_name(self.number, "errors.jsonl")

    @property
    def done_name(self) -> str:
        return part_name(self.number, "done")


def read_parts(
    files: Sequence[Path], formats: Sequence[str], part_rows: int, id_field: str | None
) -> Iterator[Part]:
    """The parts of the input files, in order, read as they are asked for."""
    number = 0
    for path, fmt in zip(files, formats, strict=True):
        for chunk in read_chunks(path, fmt, part_rows):
            yield Part(number, path.name, chunk, id_field)
            number += 1


def answer_part(
    part: Part, labeller: Labeller, columns: Columns, fmt: str
) -> tuple[bytes, bytes, int]:
    """``(output bytes, bad rows as JSON lines, bad rows)`` of one part."""
    answers, reasons = labeller.label(part.chunk.rows, part.chunk.problems)
    body = render_part(fmt, part.chunk.rows, answers, columns)
    bad = []
    for row, number, reason in zip(part.chunk.rows, part.chunk.numbers, reasons, strict=True):
        if reason is None:
            continue
        entry: dict[str, Any] = {"file": part.file, "row": number}
        if part.id_field is not None:
            entry["id"] = row.get(part.id_field) if isinstance(row, dict) else None
        entry["reason"] = reason
        bad.append(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    return body, "".join(bad).encode("utf-8"), len(bad)


# -- other processes ------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _start_worker(
    bundle_path: str, tier: int | None, options: dict[str, Any], threads: int
) -> None:
    from ..bundle import Bundle

    os.environ.setdefault("MANYHEADS_THREADS", str(threads))  # its share of the CPUs

    bundle = Bundle.load(bundle_path, cache=None, tier=tier)
    _WORKER["labeller"] = Labeller(bundle, **options)


def _answer_in_worker(job: tuple[Part, Columns, str]) -> tuple[bytes, bytes, int]:
    part, columns, fmt = job
    return answer_part(part, _WORKER["labeller"], columns, fmt)


def answered(
    parts: Iterable[Part],
    labeller: Labeller,
    columns: Columns,
    fmt: str,
    *,
    workers: int = 1,
    bundle_path: str | os.PathLike[str] | None = None,
    tier: int | None = None,
) -> Iterator[tuple[Part, tuple[bytes, bytes, int]]]:
    """Each part with its answer, in order: here, or in ``workers`` processes (each
    loading the bundle once; at most two parts a worker in flight, so memory stays
    flat)."""
    if workers <= 1:
        for part in parts:
            yield part, answer_part(part, labeller, columns, fmt)
        return
    import multiprocessing as mp
    from concurrent.futures import Future, ProcessPoolExecutor

    from ..trunks.onnxrt import cpu_threads

    options = {
        "heads": labeller.heads, "text_field": labeller.text_field,
        "max_chars": labeller.max_chars, "long_texts": labeller.long_texts,
        "batch_size": labeller.batch_size, "scores": labeller.scores,
    }  # fmt: skip
    pending: deque[tuple[Part, Future[tuple[bytes, bytes, int]]]] = deque()
    with ProcessPoolExecutor(
        workers,
        mp_context=mp.get_context("spawn"),
        initializer=_start_worker,
        initargs=(os.fspath(bundle_path or ""), tier, options, max(1, cpu_threads() // workers)),
    ) as pool:
        for part in parts:
            pending.append((part, pool.submit(_answer_in_worker, (part, columns, fmt))))
            if len(pending) >= 2 * workers:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()


# -- joining ------------------------------------------------------------------------


def join_parts(
    work: Path, count: int, columns: Columns, fmt: str, output: Path, errors: Path
) -> None:
    """Join the ``count`` parts in ``work`` into ``output`` (and their bad rows into
    ``errors``, written only when there are some), each file written beside its place
    and renamed into it."""
    outs = [work / part_name(n, "out") for n in range(count)]
    if fmt == "parquet":
        _join_parquet(outs, columns, output)
    else:
        with atomic_open(output, "wb") as raw:
            # OUTPUT.gz: gzipped, with no name or time in its header (the same bytes each run)
            gz = output.name.lower().endswith(".gz")
            out = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if gz else raw
            out.write(header(fmt, columns))
            for path in outs:
                out.write(path.read_bytes())
            if gz:
                out.close()
    blobs = [(work / part_name(n, "errors.jsonl")).read_bytes() for n in range(count)]
    errors.unlink(missing_ok=True)
    if any(blobs):
        with atomic_open(errors, "wb") as out:
            for blob in blobs:
                out.write(blob)


def _join_parquet(outs: list[Path], columns: Columns, output: Path) -> None:
    pa = require("pyarrow", "parquet")
    pq = require("pyarrow.parquet", "parquet")
    with atomic_open(output, "wb") as out:
        writer = pq.ParquetWriter(out, columns.schema)
        for path in outs:
            with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
                writer.write_table(reader.read_all())
        writer.close()
