"""The micro-batcher: concurrent ``predict`` calls merged into trunk passes, fairly.

A pass holds at most ``max_batch`` texts and ``max_pass_chars`` characters (one
text longer than that gets a pass of its own). A request larger than one pass
is answered over several passes of its own, and between two of them the
requests queued behind it get a pass (round robin), so one big request does
not hold the small ones up for its whole length: a small request waits at most
for the pass running when it came and the big request's next piece.

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
from typing import Any

from ..errors import ConfigError

__all__ = ["MicroBatcher", "check_batching"]

Answers = list[dict[str, Any]]


def check_batching(max_batch: int, max_wait_ms: float, max_pass_chars: int = 1) -> None:
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ConfigError(f"max_batch must be a positive integer, got {max_batch!r}")
    if not isinstance(max_wait_ms, (int, float)) or not 0 <= max_wait_ms <= 10_000:
        raise ConfigError(f"max_wait_ms must be between 0 and 10000, got {max_wait_ms!r}")
    chars = max_pass_chars
    if isinstance(chars, bool) or not isinstance(chars, int) or chars < 1:
        raise ConfigError(f"max_pass_chars must be a positive integer, got {max_pass_chars!r}")


@dataclass(eq=False)
class _Job:
    texts: list[str]
    future: asyncio.Future[Answers] = field(repr=False)
    answers: Answers = field(default_factory=list)
    sent: int = 0  # texts handed to a pass so far

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


class MicroBatcher:
    """Merge concurrent ``predict`` calls into trunk passes (see the module docstring).

    A pass starts as soon as the previous one is done. It waits (at most
    ``max_wait_ms``) for more requests only while fewer are queued than were
    in flight at the recent peak (the last second): under steady load the
    callers just answered are about to come back, and one pass for all of them
    is cheaper than two half-size ones; a lone request never waits.

    ``observe(n_requests, answers, seconds)``, if given, is called in the worker
    thread after each pass that succeeds.
    """

    def __init__(
        self,
        predict: Callable[[list[str]], Answers],
        *,
        max_batch: int = 64,
        max_wait_ms: float = 10.0,
        max_pass_chars: int = 100_000,
        observe: Callable[[int, Answers, float], None] | None = None,
    ) -> None:
        check_batching(max_batch, max_wait_ms, max_pass_chars)
        self._predict = predict
        self._observe = observe
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_pass_chars = max_pass_chars
        self._jobs: deque[_Job] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
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
            self._jobs.append(_Job(list(texts), future))
            assert self._wake is not None, "start() the batcher first"
            self._wake.set()
            return await future
        finally:
            self._pending -= 1

    @property
    def expected(self) -> int:
        """Requests worth waiting for: the recent peak of requests in flight."""
        return max(self._peak, self._last_peak)

    def _pass(self, texts: list[str], n_jobs: int) -> Answers:
        t0 = time.perf_counter()
        answers = self._predict(texts)
        if self._observe is not None:
            self._observe(n_jobs, answers, time.perf_counter() - t0)
        return answers

    def _queued_texts(self) -> int:
        return sum(len(j.texts) - j.sent for j in self._jobs if not j.done)

    def _take(self) -> tuple[list[_Piece], _Job | None]:
        """The next pass: whole requests in arrival order while they fit. A request that
        does not fit whole waits, first in the queue, for a pass of its own; there it
        sends what fits, and its rest (returned) goes to the back of the queue once the
        pass is done, behind the requests that came meanwhile. So small requests never
        share a pass with a big one's piece, and a big one still gets every other pass."""
        pieces: list[_Piece] = []
        n_texts = n_chars = 0
        while self._jobs and n_texts < self.max_batch:
            job = self._jobs.popleft()
            if job.done:  # failed, or its caller went away
                continue
            start = stop = job.sent
            rest = job.texts[start:]
            if pieces and (
                n_texts + len(rest) > self.max_batch
                or n_chars + sum(map(len, rest)) > self.max_pass_chars
            ):
                self._jobs.appendleft(job)  # its turn comes next, in a pass of its own
                return pieces, None
            while stop < len(job.texts) and n_texts < self.max_batch:
                size = len(job.texts[stop])
                if n_texts and n_chars + size > self.max_pass_chars:
                    break
                n_texts, n_chars, stop = n_texts + 1, n_chars + size, stop + 1
            if stop > start:
                pieces.append(_Piece(job, start, stop))
                job.sent = stop
            if job.sent < len(job.texts):
                return pieces, job  # the rest in a later pass, after the others
        return pieces, None

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait (up to ``max_wait``) for more requests while fewer are queued than the
        recent peak and the pass is not full."""
        assert self._wake is not None
        deadline = loop.time() + self.max_wait
        while self._queued_texts() < self.max_batch:
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
            if rest is not None and not rest.done:
                self._jobs.append(rest)

    async def _run_pass(self, pieces: list[_Piece]) -> None:
        texts = [t for p in pieces for t in p.texts]
        try:
            answers = await asyncio.to_thread(self._pass, texts, len(pieces))
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
                answers = await asyncio.to_thread(self._pass, p.texts, 1)
            except Exception as exc:
                self._fail(p.job, exc)
                continue
            self.batches += 1
            self._deliver(p, answers)

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
