"""What every teacher is (:class:`Teacher`: labels a batch at a time, cached, a failing
text named) and what absorbing measures of sizes; the sources are in
:mod:`manyheads.absorb.teachers`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._progress import progress_bar
from ..errors import ManyheadsError
from ..heads.kinds import Kind, kind_of
from ..trunks.base import check_texts
from ..trunks.device import CPU, Device, DeviceLike, resolve_device

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..cache import EmbeddingCache

__all__ = [
    "TEACHER_BATCH",
    "Teacher",
    "TeacherAnswers",
    "bundle_bytes",
    "folder_bytes",
    "one_line",
    "probabilities",
]

TEACHER_BATCH = 32  # texts a teacher answers at once


@dataclass(frozen=True)
class TeacherAnswers:
    """A teacher's answers to texts: ``probs`` (texts x labels) and, where the teacher
    exposes them, ``logits`` (the same shape)."""

    probs: np.ndarray
    logits: np.ndarray | None


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (or of the file)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bundle_bytes(bundle: Bundle, folder: Path) -> int:
    """Bytes on disk of what answering with ``bundle`` (saved in ``folder``) reads: the
    folder and any transformer folder its trunk uses from outside it (``minilm``'s)."""
    folder = Path(folder).resolve()
    outside = {
        part.model_folder
        for part in bundle.trunk.parts
        if part.model_folder is not None and folder not in part.model_folder.parents
    }
    return folder_bytes(folder) + sum(folder_bytes(p) for p in outside)


class Teacher:
    """A source of answers: ``name``, ``kind`` (multiclass / binary / multilabel),
    ``labels`` (the order of the answers' columns), ``fingerprint``, ``source``."""

    name: str
    kind: str
    labels: list[str]
    fingerprint: str
    source: str
    #: whether :meth:`answer` gives logits (a logit-level distillation term can use them)
    has_logits: bool = False
    #: whether it runs here (a model), so it can be timed and its size measured
    runs_here: bool = True

    def answer(
        self,
        texts: Sequence[str],
        *,
        cache: EmbeddingCache | None = None,
        progress: bool = False,
    ) -> TeacherAnswers:
        """The teacher's answers to ``texts``, a batch at a time (cached outputs reused)."""
        return self._answers(self._outputs(check_texts(texts), cache, progress))

    def _outputs(
        self, texts: list[str], cache: EmbeddingCache | None, progress: bool
    ) -> np.ndarray:
        """The teacher's outputs (texts x labels), a batch at a time, shortest texts
        first; those in ``cache`` reused, the others put there."""
        width = len(self.labels)
        out = np.zeros((len(texts), width), dtype=np.float32)
        key = f"teacher:{self.fingerprint}"
        todo = list(range(len(texts)))
        if cache is not None and texts:
            found = cache.get(key, texts, width)
            todo = [i for i, v in enumerate(found) if v is None]
            for i, v in enumerate(found):
                if v is not None:
                    out[i] = v
        order = sorted(todo, key=lambda i: len(texts[i]))
        if order:
            self.prepare()  # a teacher that cannot load is not blamed on a text
        with progress_bar(total=len(order), desc=f"teacher {self.name}", enabled=progress) as bar:
            for start in range(0, len(order), TEACHER_BATCH):
                rows = order[start : start + TEACHER_BATCH]
                batch = [texts[i] for i in rows]
                out[rows] = self._checked_run(batch, rows)
                if cache is not None:
                    cache.put(key, batch, out[rows])
                bar.update(len(rows))
        return out

    def _checked_run(self, batch: list[str], rows: list[int]) -> np.ndarray:
        """Outputs of one batch; a failure is one line naming the text that fails."""
        try:
            got = np.asarray(self._run(batch), dtype=np.float32)
            if got.shape != (len(batch), len(self.labels)) or not np.isfinite(got).all():
                raise ManyheadsError(
                    f"it answered shape {got.shape} (finite: {bool(np.isfinite(got).all())}), "
                    f"expected ({len(batch)}, {len(self.labels)}) finite values"
                )
            return got
        except Exception as exc:  # any failure of foreign code, located below
            for text, row in zip(batch, rows, strict=True):
                try:
                    one = np.asarray(self._run([text]), dtype=np.float32)
                    if one.shape != (1, len(self.labels)) or not np.isfinite(one).all():
                        raise ManyheadsError("it answered no finite scores")
                except Exception as inner:
                    raise ManyheadsError(
                        f"teacher {self.name!r} failed on text {row + 1} ({text[:60]!r}): "
                        f"{one_line(inner)}"
                    ) from None
            raise ManyheadsError(
                f"teacher {self.name!r} failed on a batch of {len(batch)} texts: {one_line(exc)}"
            ) from None

    device: Device = CPU

    def run_on(self, device: DeviceLike) -> None:
        """Answer on ``device`` from now on (a teacher that runs a model moves it there;
        the others answer as they do)."""
        self.device = resolve_device(device)

    def prepare(self) -> None:
        """Load what answering needs (a model), before the first text: a teacher that
        cannot load says so in one line of its own."""

    def _run(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _answers(self, out: np.ndarray) -> TeacherAnswers:
        return TeacherAnswers(probs=out, logits=None)

    def decide(self, probs: np.ndarray) -> list[Any]:
        """The teacher's answers as labels: the most probable (multiclass), or every label
        at 0.5 or more (multilabel; binary: the second class at 0.5)."""
        kind = kind_of(self.kind)
        return kind.decisions(self.labels, kind.decide(probs, self.thresholds(kind), None))

    def thresholds(self, kind: Kind) -> np.ndarray:
        """The thresholds :meth:`decide` applies: 0.5 each."""
        return np.full(kind.n_thresholds(len(self.labels)), 0.5, dtype=np.float32)

    def features(self, texts: Sequence[str]) -> np.ndarray:
        """What the teacher's last layer sees for each text (texts x d, float32)."""
        raise NotImplementedError

    def size_bytes(self) -> int | None:
        """Bytes on disk of what it takes to run the teacher (None: it does not run here)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.source!r})"


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def probabilities(logits: np.ndarray, kind: str, temperature: float = 1.0) -> np.ndarray:
    """Logits as probabilities (softmax for multiclass, sigmoid otherwise), softened by
    ``temperature``."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    if kind_of(kind).exclusive:  # softmax
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
