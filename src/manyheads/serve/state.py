"""The state behind the service: the bundle being served, the micro-batcher, the write
lock; head changes made on a copy, saved, then swapped in; reloads when the folder
changes on disk."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bundle import vectors_seen
from ..errors import FingerprintMismatchError, ManyheadsError
from ..learn.drift import DriftWindow
from .batcher import MicroBatcher, Pass
from .config import ServeConfig
from .errors import http_error
from .feedback import FeedbackWriter

__all__ = ["Service"]

log = logging.getLogger("manyheads.serve")


def _read_generation(folder: Path) -> str | None:
    """The generation ``folder`` holds now, as the store reads it (a newer one saved in
    the weights file wins over ``bundle.json``); None while it cannot be read."""
    from ..bundle.store import read_document

    try:
        doc = read_document(folder)
    except ManyheadsError:
        return None
    gen = doc.get("generation") if doc else None
    return gen if isinstance(gen, str) else None


def _warm(bundle: Any) -> None:
    """Build the trunk and run it once, so the first request pays nothing."""
    if bundle.heads:
        bundle.predict(["warm-up"])
    elif not bundle.trunk_needs_fit:
        bundle.embed(["warm-up"], use_cache=False)


class Service:
    """The state behind the app: the bundle being served, the batcher, the write lock."""

    def __init__(self, path: Path, config: ServeConfig, cache: Any) -> None:
        from .auth import KeyChecker
        from .metrics import ServiceMetrics

        self.path = path
        self.config = config
        self.cache = cache
        self.keys = KeyChecker(list(config.api_keys))
        self.bundle: Any = None
        self.generation: str | None = None
        self.ready = False
        self.batcher: MicroBatcher | None = None
        self.write_lock: asyncio.Lock | None = None
        self._failed_generation: str | None = None
        self._preloaded: Any = None
        self.feedback = FeedbackWriter()
        self.metrics = ServiceMetrics(
            queue_depth=lambda: self.batcher.depth if self.batcher else 0,
            n_heads=lambda: len(self.bundle.heads) if self.bundle is not None else 0,
        )
        # each head's last answers, against its reference (GET /v1/drift, /metrics)
        self.drift = DriftWindow()
        self.metrics.watch_drift(self.drift_report)

    # -- lifecycle ---------------------------------------------------------

    def preload(self) -> None:
        """Load and warm the bundle now (before the server starts), so a broken bundle
        is a one-line error of the caller's, not a failed start-up."""
        self._preloaded = self._load()

    def _load(self) -> Any:
        from ..bundle import Bundle

        bundle = Bundle.load(
            self.path,
            cache=self.cache,
            tier=self.config.tier,
            limits=self.config.limits,
            device=self.config.device,
        )
        _warm(bundle)
        return bundle

    async def start(self) -> None:
        bundle, self._preloaded = self._preloaded, None
        if bundle is None:
            bundle = await asyncio.to_thread(self._load)
        assert bundle.path is not None
        self.path = bundle.path  # a built-in bundle's folder, a tier's sub-bundle
        self._serve(bundle)
        self.write_lock = asyncio.Lock()
        window = self.config.max_chars if self.config.long_texts == "window" else None
        # a pass reads one bundle: a long text's steps, the bundle served when it began
        texts, chars, _ = self.config.pass_limits(bundle.trunk.device.accelerated)
        self.batcher = MicroBatcher(
            lambda texts: self._answer(texts, window),
            measure=lambda texts: self.bundle.trunk.work(texts),
            start=lambda text: self.bundle.predict_steps([text], max_chars=window),
            max_batch=texts,
            max_wait_ms=self.config.max_wait_ms,
            max_pass_chars=chars,
            max_pass_work=self._pass_work(bundle),
            observe=self._observe_pass,
        )
        self.batcher.start()
        self.ready = True

    def _answer(self, texts: list[str], max_chars: int | None) -> list[dict[str, Any]]:
        """One pass's answers; its vectors go to each head's inputs' window (drift)."""
        with vectors_seen() as seen:
            answers = self.bundle.predict(texts, max_chars=max_chars)
        for X in seen:
            self.drift.observe_vectors(X)
        return answers

    def _observe_pass(self, done: Pass) -> None:
        """After each trunk pass, in the worker thread: the metrics, and the answers kept
        for drift (kept only: they are counted when drift is asked for)."""
        self.metrics.observe_pass(done)
        self.drift.observe(done.answers)

    def drift_report(self) -> dict[str, dict[str, Any]]:
        """Each served head's drift over the answers of its window."""
        bundle = self.bundle
        return {} if bundle is None else self.drift.report(bundle.head_info)

    def _serve(self, bundle: Any) -> None:
        """Serve ``bundle`` from now on; metric series of heads and labels it lacks go,
        and the drift window of a head replaced starts again."""
        self.drift.follow(bundle.head_info)
        self.bundle, self.generation = bundle, bundle.generation
        self.metrics.keep_heads({n: [str(v) for v in bundle.labels(n)] for n in bundle.heads})
        if self.batcher is not None:
            self.batcher.max_pass_work = self._pass_work(bundle)

    def _pass_work(self, bundle: Any) -> int:
        """The trunk work one pass may hold: ``max_pass_tokens`` for a trunk that reads
        token windows, ``max_pass_chars`` for one that is cheap per character."""
        tokens = not bundle.trunk_needs_fit and bundle.trunk.work_unit == "tokens"
        _, chars, most_tokens = self.config.pass_limits(bundle.trunk.device.accelerated)
        return most_tokens if tokens else chars

    async def stop(self) -> None:
        self.ready = False
        if self.batcher is not None:
            await self.batcher.stop()
        await asyncio.to_thread(self.feedback.close)

    # -- head changes ------------------------------------------------------

    async def change(
        self, action: str, fn: Callable[[Any], Any], after: Callable[[Any], Any] | None = None
    ) -> Any:
        """Apply ``fn`` to a copy of the bundle, save it (then ``after`` on it), then
        serve it. Answers go on from the bundle served meanwhile."""
        assert self.write_lock is not None
        async with self.write_lock:
            current = self.bundle

            def work() -> tuple[Any, Any]:
                from ..bundle import check_writable

                check_writable(self.path)  # a built-in bundle: before any work
                new = current.copy()
                result = fn(new)
                new.save(self.path)
                if after is not None:
                    after(new)
                return new, result

            try:
                new, result = await asyncio.to_thread(work)
            except ManyheadsError as exc:
                raise http_error(exc) from exc
            self._serve(new)
            self.metrics.updates.labels(action).inc()
            log.info("head change: %s (generation %s)", action, new.generation)
            return result

    # -- corrections and learning ----------------------------------------------

    async def add_feedback(self, texts: list[str], labels: dict[str, list[Any]]) -> dict:
        """Keep corrections with the bundle (on disk when this returns)."""
        bundle, limits = self.bundle, self.config.feedback_limits
        try:
            rows = bundle.check_feedback(texts, labels, limits=limits)
            kept = await self.feedback.keep(bundle, rows, limits)
        except ManyheadsError as exc:
            raise http_error(exc) from exc
        for head, n in kept.items():
            self.metrics.feedback.labels(head).inc(n)
        return dict(kept)

    def _due(self) -> list[str]:
        """The heads with ``learn_after`` corrections no update has judged."""
        counts = self.bundle.feedback_counts()
        after = self.config.learn_after
        return [h for h, c in counts.items() if h in self.bundle.heads and c["new"] >= after]

    async def learn(self) -> None:
        """Update heads in the background as corrections come (``serve --learn``): every
        ``learn_check_s``, the heads with ``learn_after`` new corrections are refitted
        by a worker process from the bundle's folder and each promoted only when not
        worse (the guard of :mod:`manyheads.learn.update`); the saved bundle is then
        served between two trunk passes. Answering goes on meanwhile. One update runs
        on a bundle folder at a time, whichever replica starts it."""
        from .learner import Learner

        learner = Learner(self.cache)
        try:
            while True:
                await asyncio.sleep(self.config.learn_check_s)
                try:
                    due = await asyncio.to_thread(self._due)
                    if not due:
                        continue
                    report = await learner.update(self.path, due, self.config.learn_after)
                    for h in report["heads"]:
                        log.info("update of head %s: %s", h["head"], h["reason"])
                    if any(h["rows_feedback"] for h in report["heads"]):
                        await self._take_saved("update")
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # another replica updating, a bad row: try later
                    log.warning("manyheads: no update this time: %s", exc)
        finally:
            await asyncio.to_thread(learner.close)

    async def _take_saved(self, action: str) -> None:
        """Serve what the folder holds now (saved by a worker of ours)."""
        assert self.write_lock is not None
        async with self.write_lock:
            new = await asyncio.to_thread(self._reload)
            self._serve(new)
            self.metrics.updates.labels(action).inc()

    async def watch(self) -> None:
        """Reload the bundle when its folder holds another generation than the one served."""
        while True:
            await asyncio.sleep(self.config.watch_interval)
            gen = await asyncio.to_thread(_read_generation, self.path)
            if gen is None or gen in (self.generation, self._failed_generation):
                continue
            assert self.write_lock is not None
            async with self.write_lock:
                if _read_generation(self.path) in (None, self.generation):
                    continue  # our own save, or gone meanwhile
                try:
                    new = await asyncio.to_thread(self._reload)
                except Exception as exc:  # keep serving what we have
                    self._failed_generation = gen
                    log.warning("manyheads: could not reload %s: %s", self.path, exc)
                    continue
                self._serve(new)
                self.metrics.reloads.inc()
                log.info("reloaded %s (generation %s)", self.path, new.generation)

    def _reload(self) -> Any:
        from ..bundle import Bundle

        old = self.bundle
        new: Bundle | None = None
        with contextlib.suppress(FingerprintMismatchError):
            # keep the loaded trunk when the bundle still names the same one
            new = Bundle.load(
                self.path,
                cache=self.cache,
                trunk=old.trunk,
                limits=old.limits,
                device=old.device,
            )
        if new is None or new.trunk_reference != old.trunk_reference:
            new = Bundle.load(self.path, cache=self.cache, limits=old.limits, device=old.device)
        _warm(new)
        return new
