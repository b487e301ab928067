"""Corrections arriving at the service, written together: each request's rows are
checked on their own, then every request waiting is appended in one write and one
``fsync`` by one writer thread of its own (group commit), so many clients correcting at
once cost the disk one sync per round and never take the threads that answer. Each
request is answered once its rows are on disk; a round that would pass the log's cap
is written request by request, so only those that do not fit are refused."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..bundle.feedback import FeedbackFullError, FeedbackLimits, rows_per_head

__all__ = ["FeedbackWriter"]


class FeedbackWriter:
    """Appends the rows of waiting requests to a bundle's log in rounds."""

    def __init__(self) -> None:
        self._waiting: list[tuple[list[dict[str, Any]], asyncio.Future[Any]]] = []
        self._running = False
        self._task: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="manyheads-feedback")

    async def keep(self, bundle: Any, rows: list[dict[str, Any]], limits: FeedbackLimits) -> Any:
        """Keep ``rows`` (checked by ``bundle.check_feedback``) with ``bundle``; the rows
        kept per head, once they are on disk."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((rows, done))
        if not self._running:
            self._running = True
            self._task = loop.create_task(self._drain(bundle, limits))
        return await done

    async def _drain(self, bundle: Any, limits: FeedbackLimits) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                rows = [r for request, _ in batch for r in request]
                try:
                    await loop.run_in_executor(self._pool, self._append, bundle, rows, limits)
                except FeedbackFullError:  # one by one: those that fit are kept
                    for request, done in batch:
                        await self._one(bundle, request, limits, done)
                    continue
                except Exception as exc:
                    for _, done in batch:
                        _settle(done, exc=exc)
                    continue
                for request, done in batch:
                    _settle(done, rows_per_head(request))
        finally:
            self._running = False

    async def _one(
        self, bundle: Any, rows: list[dict[str, Any]], limits: FeedbackLimits, done: Any
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self._append, bundle, rows, limits)
        except Exception as exc:
            _settle(done, exc=exc)
        else:
            _settle(done, rows_per_head(rows))

    @staticmethod
    def _append(bundle: Any, rows: list[dict[str, Any]], limits: FeedbackLimits) -> None:
        bundle.keep_feedback(rows, limits=limits)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _settle(done: Any, result: Any = None, exc: BaseException | None = None) -> None:
    if done.done():
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)
