"""The FastAPI app: ``POST /v1/predict`` with dynamic micro-batching, health endpoints.

Concurrent requests are queued and merged into one trunk pass (at most
``max_batch`` texts, waiting at most ``max_wait_ms`` for more); the pass runs
in a worker thread, off the event loop, and each caller gets its own rows
back, in order. Every pass takes one snapshot of the bundle's heads, so a
request sees one head set.
"""

import asyncio
import contextlib
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ManyheadsError, require


@dataclass
class _Job:
    texts: list[str]
    future: asyncio.Future[list[dict[str, Any]]] = field(repr=False)


class MicroBatcher:
    """Merge concurrent ``predict`` calls into trunk passes of up to ``max_batch`` texts."""

    def __init__(self, predict: Any, *, max_batch: int = 64, max_wait_ms: float = 5.0) -> None:
        if max_batch < 1:
            raise ManyheadsError(f"max_batch must be at least 1, got {max_batch}")
        if max_wait_ms < 0:
            raise ManyheadsError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self._predict = predict
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, texts: list[str]) -> list[dict[str, Any]]:
        future: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Job(texts, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self._queue.get()]
            size = len(jobs[0].texts)
            deadline = loop.time() + self.max_wait
            while size < self.max_batch:
                timeout = deadline - loop.time()
                try:
                    job = (
                        self._queue.get_nowait()
                        if timeout <= 0
                        else await asyncio.wait_for(self._queue.get(), timeout)
                    )
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                jobs.append(job)
                size += len(job.texts)
            texts = [t for j in jobs for t in j.texts]
            try:
                answers = await asyncio.to_thread(self._predict, texts)
            except Exception as exc:  # handed to every caller of this pass
                for j in jobs:
                    if not j.future.done():
                        j.future.set_exception(exc)
                continue
            self.batches += 1
            start = 0
            for j in jobs:
                if not j.future.done():
                    j.future.set_result(answers[start : start + len(j.texts)])
                start += len(j.texts)


def create_app(
    bundle_path: str | Path,
    *,
    max_batch: int = 64,
    max_wait_ms: float = 5.0,
    max_texts: int = 1000,
    max_chars: int = 100_000,
) -> Any:
    """The service for the bundle at ``bundle_path`` (loaded once, in the lifespan)."""
    fastapi = require("fastapi", "serve")
    from fastapi import Request
    from fastapi.responses import JSONResponse

    from ..bundle import Bundle

    state: dict[str, Any] = {"ready": False}

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        bundle = await asyncio.to_thread(Bundle.load, bundle_path, cache=None)
        await asyncio.to_thread(bundle.predict, ["warm-up"])  # builds the trunk
        state["bundle"] = bundle
        batcher = MicroBatcher(
            lambda texts: state["bundle"].predict(texts),
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
        )
        batcher.start()
        state["batcher"] = batcher
        state["ready"] = True
        yield
        state["ready"] = False
        await batcher.stop()

    app = fastapi.FastAPI(title="manyheads", lifespan=lifespan)

    def error(status: int, code: str, message: str) -> Any:
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Any:
        if not state["ready"]:
            return error(503, "not_ready", "the bundle is still loading")
        return {"status": "ready", "heads": list(state["bundle"].heads)}

    @app.get("/v1/heads")
    async def heads() -> Any:
        if not state["ready"]:
            return error(503, "not_ready", "the bundle is still loading")
        bundle = state["bundle"]
        return {
            "heads": [
                {
                    "name": name,
                    "kind": info.get("kind"),
                    "labels": bundle.labels(name),
                    "metrics": info.get("metrics", {}),
                }
                for name, info in bundle.head_info.items()
            ]
        }

    @app.post("/v1/predict")
    async def predict(request: Request) -> Any:
        body = await request.body()  # read whole, then judge it
        try:
            doc = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            return error(400, "bad_encoding", "the request body is not valid UTF-8")
        except json.JSONDecodeError as exc:
            return error(400, "bad_json", f"the request body is not JSON: {exc}")
        if not isinstance(doc, dict):
            return error(422, "bad_request", "the body must be a JSON object with 'texts'")
        texts, heads = doc.get("texts"), doc.get("heads")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return error(422, "bad_texts", "'texts' must be a list of strings")
        if not texts:
            return error(422, "empty_texts", "'texts' is empty")
        if len(texts) > max_texts:
            return error(413, "too_many_texts", f"{len(texts)} texts; at most {max_texts}")
        long = [i for i, t in enumerate(texts) if len(t) > max_chars]
        if long:
            return error(
                413, "text_too_long", f"text #{long[0]} is longer than {max_chars} characters"
            )
        if heads is not None and (
            not isinstance(heads, list) or not heads or not all(isinstance(h, str) for h in heads)
        ):
            return error(422, "bad_heads", "'heads' must be a non-empty list of head names")
        if not state["ready"]:
            return error(503, "not_ready", "the bundle is still loading")
        t0 = time.perf_counter()
        answers = await state["batcher"].submit(texts)
        if heads is not None:
            known = answers[0].keys()
            unknown = [h for h in heads if h not in known]
            if unknown:
                return error(
                    404,
                    "unknown_head",
                    f"unknown head {unknown[0]!r}; the bundle has: " + ", ".join(known),
                )
            answers = [{h: a[h] for h in heads} for a in answers]
        return {"results": answers, "seconds": round(time.perf_counter() - t0, 6)}

    return app
