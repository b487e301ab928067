"""The service's background updates (``serve --learn``), run in a worker process of their
own at a lower priority: refitting a head is seconds of CPU that, in the serving
process, would hold the interpreter the answers need. The worker loads the bundle from
its folder, updates the heads that are due (:meth:`~manyheads.bundle.Bundle.update_heads`,
which saves, holding the folder's update lock), and reports; the service then loads the
saved bundle and serves it between two trunk passes."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["Learner"]


def _lower_priority() -> None:
    with contextlib.suppress(OSError):
        os.nice(10)


def _update(folder: str, heads: list[str], min_feedback: int, cache: Any) -> dict[str, Any]:
    from ..bundle import Bundle

    bundle = Bundle.load(folder, cache=cache)
    report = bundle.update_heads(heads, min_feedback=min_feedback, wait=False)
    return report.to_dict()


class Learner:
    """One worker process that updates a bundle's heads when asked."""

    def __init__(self, cache: Any) -> None:
        from ..cache import EmbeddingCache

        # the worker opens the cache itself: by its path, or as the service was given it
        self.cache = str(cache.path) if isinstance(cache, EmbeddingCache) else cache
        self._pool: ProcessPoolExecutor | None = None

    def _workers(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority,
            )
        return self._pool

    async def update(self, folder: Path, heads: list[str], min_feedback: int) -> dict[str, Any]:
        """Update ``heads`` of the bundle at ``folder`` in the worker; its report."""
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._workers(), _update, str(folder), heads, min_feedback, self.cache
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
