"""The micro-batcher: concurrent ``predict`` calls merged into trunk passes, fairly.

A pass holds at most ``max_batch`` texts, ``max_pass_chars`` characters and
``max_pass_work`` trunk work (what the trunk says encoding a text costs: the
tokens of its windows for a transformer, characters for a trunk cheap per
character; each request's texts are measured once, when it comes). A request
larger than one pass is answered over several passes of its own, and between
two of them the requests queued behind it get a pass (round robin), so one big
request does not hold the small ones up for its whole length: a small request
waits at most for the pass running when it came and the big request's next
piece.

A text that alone is over a cap gets passes of its own: read a step at a time
(``start(text)`` gives its steps; a transformer reads a few token windows per
step, at most ``max_pass_work`` tokens), its turn coming round like any other
request's, so one long text holds the others up for one step, not for its whole
length. A trunk that cannot split a text reads it in one step.

A pass that fails is run again one request at a time, so only the request whose
text made it fail gets the error; the others get their answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ConfigError, positive_int

__all__ = ["MicroBatcher", "Pass", "Steps", "check_batching"]

Answers = list[dict[str, Any]]
# a request of at most this many characters is measured on the event loop (at most
# about a millisecond of tokenising), a bigger one in a worker thread
_MEASURE_INLINE = 2048


def check_batching(
    max_batch: int, max_wait_ms: float, max_pass_chars: int = 1, max_pass_tokens: int = 1
) -> None:
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ConfigError(f"max_batch must be a positive integer, got {max_batch!r}")
    if not isinstance(max_wait_ms, (int, float)) or not 0 <= max_wait_ms <= 10_000:
        raise ConfigError(f"max_wait_ms must be between 0 and 10000, got {max_wait_ms!r}")
    positive_int(max_pass_chars, "max_pass_chars")
    positive_int(max_pass_tokens, "max_pass_tokens")


class Steps(Protocol):
    """One text's answer, its trunk work done a step at a time
    (:meth:`manyheads.Bundle.predict_steps`)."""

    @property
    def divisible(self) -> bool: ...

    @property
    def done(self) -> bool: ...

    def step(self, budget: int) -> int: ...

    def answers(self) -> Answers: ...


@dataclass(frozen=True)
class Pass:
    """One trunk pass, as ``observe`` sees it: the requests it served, the texts it
    answered, its seconds and trunk work; ``step``: a step of one long text (whose
    answer comes with its last step)."""

    requests: int
    answers: Answers
    seconds: float
    work: int
    step: bool = False


@dataclass(eq=False)
class _Job:
    texts: list[str]
    work: list[int]  # each text's trunk work
    future: asyncio.Future[Answers] = field(repr=False)
    answers: Answers = field(default_factory=list)
    sent: int = 0  # texts handed to a pass so far
    steps: Steps | None = None  # the text at ``sent``, being read a step at a time

    @property
    def done(self) -> bool:
        return self.future.done()


@dataclass(frozen=True)
class _Piece:
    job: _Job
    start: int
    stop: int

    @property
    def texts(self) -> list[str]:
        return self.job.texts[self.start : self.stop]

    @property
    def work(self) -> int:
        return sum(self.job.work[self.start : self.stop])


class MicroBatcher:
    """Merge concurrent ``predict`` calls into trunk passes (see the module docstring).

    A pass starts as soon as the previous one is done. It waits (at most
    ``max_wait_ms``) for more requests only while fewer are queued than were
    in flight at the recent peak (the last second) and the pass is not full:
    under steady load the callers just answered are about to come back, and one
    pass for all of them is cheaper than two half-size ones; a lone request
    never waits.

    ``measure(texts)`` gives each text's trunk work (default: its characters);
    ``start(text)`` its :class:`Steps` when it is over a cap (default: none, the
    text is answered by ``predict`` in a pass of its own). ``observe(Pass)``, if
    given, is called in the worker thread after each pass that succeeds.
    """

    def __init__(
        self,
        predict: Callable[[list[str]], Answers],
        *,
        measure: Callable[[list[str]], list[int]] | None = None,
        start: Callable[[str], Steps] | None = None,
        max_batch: int = 64,
        max_wait_ms: float = 10.0,
        max_pass_chars: int = 100_000,
        max_pass_work: int | None = None,
        observe: Callable[[Pass], None] | None = None,
    ) -> None:
        work = max_pass_chars if max_pass_work is None else max_pass_work
        check_batching(max_batch, max_wait_ms, max_pass_chars, work)
        self._predict = predict
        self._measure = measure
        self._start = start
        self._observe = observe
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_pass_chars = max_pass_chars
        self.max_pass_work = work
        self._jobs: deque[_Job] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.steps = 0  # passes that read a step of a long text
        self.retried = 0  # failed passes run again one request at a time
        self._pending = 0  # requests submitted, not yet answered
        self._peak = 0  # most pending at once in the current window
        self._peak_start = 0.0
        self._last_peak = 0  # the previous window's peak

    @property
    def depth(self) -> int:
        """Requests waiting for a pass (or for their next one)."""
        return sum(1 for j in self._jobs if not j.done)

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, texts: list[str]) -> Answers:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answers] = loop.create_future()
        self._pending += 1
        now = loop.time()
        if now - self._peak_start > 1.0:
            self._last_peak, self._peak, self._peak_start = self._peak, 0, now
        self._peak = max(self._peak, self._pending)
        try:
            if not texts:
                return []
            texts = list(texts)
            if sum(map(len, texts)) <= _MEASURE_INLINE:
                work = self._work(texts)
            else:
                work = await asyncio.to_thread(self._work, texts)
            self._jobs.append(_Job(texts, work, future))
            assert self._wake is not None, "start() the batcher first"
            self._wake.set()
            return await future
        finally:
            self._pending -= 1

    def _work(self, texts: list[str]) -> list[int]:
        """Each text's trunk work; its characters when the trunk cannot tell (the pass
        that reads it then says what is wrong, to its caller only)."""
        if self._measure is None:
            return [len(t) for t in texts]
        try:
            return [int(w) for w in self._measure(texts)]
        except Exception:  # the pass that reads them answers it, to this request only
            return [len(t) for t in texts]

    @property
    def expected(self) -> int:
        """Requests worth waiting for: the recent peak of requests in flight."""
        return max(self._peak, self._last_peak)

    def _pass(self, texts: list[str], n_jobs: int, work: int) -> Answers:
        t0 = time.perf_counter()
        answers = self._predict(texts)
        if self._observe is not None:
            self._observe(Pass(n_jobs, answers, time.perf_counter() - t0, work))
        return answers

    def _queued(self) -> tuple[int, int, int]:
        """Texts, characters and trunk work queued, not yet handed to a pass."""
        texts = chars = work = 0
        for job in self._jobs:
            if not job.done:
                texts += len(job.texts) - job.sent
                chars += sum(map(len, job.texts[job.sent :]))
                work += sum(job.work[job.sent :])
        return texts, chars, work

    def _alone(self, job: _Job, i: int) -> bool:
        """Whether text ``i`` of ``job`` is over a cap: passes of its own, a step each."""
        return job.work[i] > self.max_pass_work or len(job.texts[i]) > self.max_pass_chars

    def _take(self) -> tuple[list[_Piece], _Job | None]:
        """The next pass: whole requests in arrival order while they fit. A request that
        does not fit whole waits, first in the queue, for a pass of its own; there it
        sends what fits, and its rest (returned) goes to the back of the queue once the
        pass is done, behind the requests that came meanwhile. So small requests never
        share a pass with a big one's piece, and a big one still gets every other pass.
        A text over a cap is a step of its own: no pieces, and its job returned."""
        pieces: list[_Piece] = []
        n_texts = n_chars = n_work = 0
        while self._jobs and n_texts < self.max_batch:
            job = self._jobs.popleft()
            if job.done:  # failed, or its caller went away
                continue
            start = stop = job.sent
            if job.steps is not None or self._alone(job, start):
                if pieces:
                    self._jobs.appendleft(job)  # its step comes next, in a pass of its own
                    return pieces, None
                return [], job
            rest = range(start, len(job.texts))
            if pieces and (
                n_texts + len(rest) > self.max_batch
                or n_chars + sum(len(job.texts[i]) for i in rest) > self.max_pass_chars
                or n_work + sum(job.work[i] for i in rest) > self.max_pass_work
            ):
                self._jobs.appendleft(job)  # its turn comes next, in a pass of its own
                return pieces, None
            while stop < len(job.texts) and n_texts < self.max_batch:
                size, work = len(job.texts[stop]), job.work[stop]
                if self._alone(job, stop) or (
                    n_texts
                    and (n_chars + size > self.max_pass_chars or n_work + work > self.max_pass_work)
                ):
                    break
                n_texts, n_chars, n_work, stop = (
                    n_texts + 1,
                    n_chars + size,
                    n_work + work,
                    stop + 1,
                )
            pieces.append(_Piece(job, start, stop))
            job.sent = stop
            if job.sent < len(job.texts):
                return pieces, job  # the rest in a later pass, after the others
        return pieces, None

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait (up to ``max_wait``) for more requests while fewer are queued than the
        recent peak and the pass is not full; never before a long text's step (what
        came meanwhile would wait behind it)."""
        assert self._wake is not None
        first = next((j for j in self._jobs if not j.done), None)
        if first is not None and (first.steps is not None or self._alone(first, first.sent)):
            return
        deadline = loop.time() + self.max_wait
        while True:
            texts, chars, work = self._queued()
            if (
                texts >= self.max_batch
                or chars >= self.max_pass_chars
                or work >= self.max_pass_work
            ):
                return
            queued = sum(1 for j in self._jobs if not j.done)
            timeout = deadline - loop.time()
            if queued >= self.expected or timeout <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                return

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            if not any(not j.done for j in self._jobs):
                self._jobs.clear()
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._gather(loop)
            pieces, rest = self._take()
            if pieces:
                await self._run_pass(pieces)
            elif rest is not None:
                await self._run_step(rest)
            if rest is not None and not rest.done:
                self._jobs.append(rest)

    async def _run_pass(self, pieces: list[_Piece]) -> None:
        texts = [t for p in pieces for t in p.texts]
        work = sum(p.work for p in pieces)
        try:
            answers = await asyncio.to_thread(self._pass, texts, len(pieces), work)
        except Exception as exc:
            if len(pieces) == 1:
                self._fail(pieces[0].job, exc)
            else:
                self.retried += 1
                await self._one_by_one(pieces)
            return
        self.batches += 1
        offset = 0
        for p in pieces:
            self._deliver(p, answers[offset : offset + (p.stop - p.start)])
            offset += p.stop - p.start

    async def _one_by_one(self, pieces: list[_Piece]) -> None:
        """A failed pass again, one request's piece at a time: only the guilty fail."""
        for p in pieces:
            if p.job.done:
                continue
            try:
                answers = await asyncio.to_thread(self._pass, p.texts, 1, p.work)
            except Exception as exc:
                self._fail(p.job, exc)
                continue
            self.batches += 1
            self._deliver(p, answers)

    async def _run_step(self, job: _Job) -> None:
        """The next step of the text at ``job.sent`` (over a cap), in a pass of its own."""
        i = job.sent
        try:
            answers = await asyncio.to_thread(self._step, job, i)
        except Exception as exc:
            self._fail(job, exc)
            return
        self.batches += 1
        if answers:  # its last step
            job.steps, job.sent = None, i + 1
            self._deliver(_Piece(job, i, i + 1), answers)

    def _step(self, job: _Job, i: int) -> Answers:
        """In the worker thread: one step of text ``i`` of ``job`` (its steps started
        first); its answer with its last step, else nothing."""
        t0 = time.perf_counter()
        if self._start is None:  # no steps: the text whole, in a pass of its own
            return self._pass(job.texts[i : i + 1], 1, job.work[i])
        if job.steps is None:
            job.steps = self._start(job.texts[i])
        steps = job.steps
        work = steps.step(self.max_pass_work)
        if not steps.divisible:
            work = job.work[i]
        answers = steps.answers() if steps.done else []
        self.steps += 1
        if self._observe is not None:
            self._observe(Pass(1, answers, time.perf_counter() - t0, work, step=True))
        return answers

    @staticmethod
    def _deliver(piece: _Piece, answers: Answers) -> None:
        job = piece.job
        if job.done:
            return
        job.answers.extend(answers)
        if len(job.answers) == len(job.texts):
            job.future.set_result(job.answers)

    @staticmethod
    def _fail(job: _Job, exc: Exception) -> None:
        if not job.done:
            job.future.set_exception(exc)
