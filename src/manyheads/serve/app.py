"""The FastAPI app: every head of a bundle from one trunk pass, over HTTP.

Concurrent ``/v1/predict`` requests are queued and merged into trunk passes
(:class:`~manyheads.serve.batcher.MicroBatcher`: at most ``max_batch`` texts,
``max_pass_chars`` characters and, on a trunk that reads token windows,
``max_pass_tokens`` tokens a pass, waiting at most ``max_wait_ms`` for more; a big
request is answered over several passes, taking turns with the others; a text over
a cap is read a step per pass, ``Bundle.predict_steps``, the others' passes between
its steps; a failed pass is retried one request at a time); the pass runs in a
worker thread, off the event loop, and each caller gets its own rows back, in
order. Texts that are not valid Unicode are refused before they are queued.

Head changes (``PUT`` / ``DELETE /v1/heads/{name}``, ``POST
/v1/heads/{name}/train``, a reload with ``watch``) are made on a copy of the
bundle, saved atomically, then swapped in with one assignment: a trunk pass
reads the bundle once, so a request sees the old head set or the new one,
never a mix. Writes are serialised; predictions never wait for them.

The parts: ``config`` (limits), ``schemas`` (bodies), ``state`` (the service
state), ``routes``, ``batcher``, ``metrics``, ``auth``, ``payload`` (a head as
JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ..errors import ConfigError, require
from .config import ServeConfig
from .errors import HTTPError
from .state import Service

__all__ = ["create_app"]

log = logging.getLogger("manyheads.serve")
_DEFAULT_CACHE = "default"


def create_app(
    bundle_path: str | Path,
    config: ServeConfig | None = None,
    *,
    cache: Any = _DEFAULT_CACHE,
    preload: bool = False,
    **options: Any,
) -> Any:
    """The service for the bundle at ``bundle_path`` (loaded once, in the lifespan;
    a built-in bundle's name works too, see ``Bundle.load``). ``preload=True`` loads
    and warms it here instead, so a broken bundle raises before any server starts.

    ``config`` (or its fields as keyword arguments) sets limits, batching, API
    keys, ``watch`` and ``tier``; ``cache`` is the embedding cache used to train heads.
    """
    fastapi = require("fastapi", "serve")
    require("prometheus_client", "serve")
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from .._version import __version__
    from ..bundle import bundle_folder
    from .routes import router

    if config is None:
        config = ServeConfig(**options)
    elif options:
        raise ConfigError("give either config or keyword options, not both")
    service = Service(bundle_folder(bundle_path), config, cache)
    if preload:
        service.preload()

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        await service.start()
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(service.watch())] if config.watch else []
        if config.learn:
            tasks.append(loop.create_task(service.learn()))
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await service.stop()

    app = fastapi.FastAPI(
        title="manyheads",
        version=__version__,
        description="Every head of a manyheads bundle from one trunk pass.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.add_middleware(_Observe, metrics=service.metrics)

    def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Any:
        return JSONResponse(
            {"error": {"code": code, "message": message}}, status_code=status, headers=headers
        )

    @app.exception_handler(HTTPError)
    async def on_http_error(request: Request, exc: HTTPError) -> Any:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error(exc.status, exc.code, exc.message, headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_starlette(request: Request, exc: StarletteHTTPException) -> Any:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError) -> Any:
        return error(422, "bad_request", str(exc.errors()[:1]))

    @app.exception_handler(Exception)
    async def on_crash(request: Request, exc: Exception) -> Any:
        log.exception("manyheads: internal error on %s %s", request.method, request.url.path)
        return error(500, "internal", f"internal error: {type(exc).__name__}")

    app.include_router(router)
    return app


class _Observe:
    """ASGI middleware: count and time every HTTP request by route template and status."""

    def __init__(self, app: Any, metrics: Any) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.observe_request(
                scope["method"], _route_path(scope), status, time.perf_counter() - start
            )


def _route_path(scope: Any) -> str:
    """The path template of the route that answered (``/v1/heads/{name}``): FastAPI's own
    routes name themselves in the scope; the schema and docs pages (plain Starlette
    routes) are found by their endpoint; ``(unmatched)`` when no route matched."""
    route = scope.get("route")
    if route is None and "endpoint" in scope:
        endpoint = scope["endpoint"]
        app = scope.get("app")
        routes = getattr(app, "routes", ())
        route = next((r for r in routes if getattr(r, "endpoint", None) is endpoint), None)
    return getattr(route, "path", None) or "(unmatched)"
