"""The FastAPI app: every head of a bundle from one trunk pass, over HTTP.

Concurrent ``/v1/predict`` requests are queued and merged into trunk passes
(:class:`~manyheads.serve.batcher.MicroBatcher`: at most ``max_batch`` texts
and ``max_pass_chars`` characters a pass, waiting at most ``max_wait_ms`` for
more; a big request is answered over several passes, taking turns with the
others; a failed pass is retried one request at a time); the pass runs in a
worker thread, off the event loop, and each caller gets its own rows back, in
order. Texts that are not valid Unicode are refused before they are queued.

Head changes (``PUT`` / ``DELETE /v1/heads/{name}``, ``POST
/v1/heads/{name}/train``, a reload with ``watch``) are made on a copy of the
bundle, saved atomically, then swapped in with one assignment: a trunk pass
reads the bundle once, so a request sees the old head set or the new one,
never a mix. Writes are serialised; predictions never wait for them.
"""

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from .._text import unicode_problem
from ..errors import (
    BundleError,
    ConfigError,
    FingerprintMismatchError,
    ManyheadsError,
    UnknownHeadError,
    require,
)
from ..heads.fused import KINDS
from ..heads.record import HeadLimits
from .batcher import MicroBatcher, check_batching

log = logging.getLogger("manyheads.serve")

LONG_TEXTS = ("refuse", "window")
_DEFAULT_CACHE = "default"


class HTTPError(Exception):
    """A 4xx answer: ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _http_error(exc: ManyheadsError) -> HTTPError:
    """The 4xx answer for a library error raised by a request's data."""
    message = str(exc.args[0]) if exc.args else str(exc)
    if isinstance(exc, UnknownHeadError):
        return HTTPError(404, "unknown_head", message)
    if isinstance(exc, FingerprintMismatchError):
        return HTTPError(409, "fingerprint_mismatch", message)
    if isinstance(exc, BundleError):
        return HTTPError(409, "bundle_state", message)
    return HTTPError(422, "bad_data", message)


@dataclass(frozen=True)
class ServeConfig:
    """Limits and options of the service (checked on creation)."""

    max_batch: int = 64
    max_wait_ms: float = 10.0
    max_texts: int = 1000
    max_chars: int = 100_000
    long_texts: str = "refuse"  # or "window": longer texts are read in pieces
    max_body_bytes: int = 16 * 1024 * 1024
    max_train_texts: int = 100_000
    max_pass_chars: int = 100_000  # characters in one trunk pass (one longer text: alone)
    max_labels: int = HeadLimits.max_labels  # labels of one head (PUT, train)
    max_label_chars: int = HeadLimits.max_label_chars  # characters of one label
    max_heads: int = HeadLimits.max_heads  # heads of the bundle
    body_timeout_s: float = 30.0  # longest wait for the next piece of a request body
    api_keys: tuple[str, ...] = ()
    watch: bool = False
    watch_interval: float = 1.0
    tier: int | None = None  # a byte bundle's heads at this tier (its tiers/<tier>/)

    @property
    def limits(self) -> HeadLimits:
        return HeadLimits(
            max_labels=self.max_labels,
            max_label_chars=self.max_label_chars,
            max_heads=self.max_heads,
        )

    def __post_init__(self) -> None:
        check_batching(self.max_batch, self.max_wait_ms, self.max_pass_chars)
        HeadLimits(self.max_labels, self.max_label_chars, self.max_heads)  # checks the caps
        if not isinstance(self.body_timeout_s, int | float) or not self.body_timeout_s > 0:
            raise ConfigError(f"body_timeout_s must be > 0, got {self.body_timeout_s!r}")
        if self.tier is not None and (
            not isinstance(self.tier, int) or isinstance(self.tier, bool) or self.tier < 1
        ):
            raise ConfigError(f"tier must be a positive integer, got {self.tier!r}")
        for name in ("max_texts", "max_chars", "max_body_bytes", "max_train_texts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.long_texts not in LONG_TEXTS:
            raise ConfigError(
                f"long_texts must be one of {', '.join(LONG_TEXTS)}, got {self.long_texts!r}"
            )
        if not self.watch_interval > 0:
            raise ConfigError(f"watch_interval must be > 0, got {self.watch_interval!r}")


def _read_generation(folder: Path) -> str | None:
    try:
        doc = json.loads((folder / "bundle.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    gen = doc.get("generation") if isinstance(doc, dict) else None
    return gen if isinstance(gen, str) else None


def check_listen(host: str, port: int) -> None:
    """Refuse a port outside 1-65535, or an address this process cannot listen on
    (in use, not ours), in one line, before anything is loaded or announced."""
    import socket

    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"--port must be between 1 and 65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


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
        self.metrics = ServiceMetrics(
            queue_depth=lambda: self.batcher.depth if self.batcher else 0,
            n_heads=lambda: len(self.bundle.heads) if self.bundle is not None else 0,
        )

    # -- lifecycle ---------------------------------------------------------

    def preload(self) -> None:
        """Load and warm the bundle now (before the server starts), so a broken bundle
        is a one-line error of the caller's, not a failed start-up."""
        self._preloaded = self._load()

    def _load(self) -> Any:
        from ..bundle import Bundle

        bundle = Bundle.load(
            self.path, cache=self.cache, tier=self.config.tier, limits=self.config.limits
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
        self.batcher = MicroBatcher(
            lambda texts: self.bundle.predict(texts, max_chars=window),
            max_batch=self.config.max_batch,
            max_wait_ms=self.config.max_wait_ms,
            max_pass_chars=self.config.max_pass_chars,
            observe=self.metrics.observe_batch,
        )
        self.batcher.start()
        self.ready = True

    def _serve(self, bundle: Any) -> None:
        """Serve ``bundle`` from now on; metric series of heads and labels it lacks go."""
        self.bundle, self.generation = bundle, bundle.generation
        self.metrics.keep_heads({n: [str(v) for v in bundle.labels(n)] for n in bundle.heads})

    async def stop(self) -> None:
        self.ready = False
        if self.batcher is not None:
            await self.batcher.stop()

    # -- head changes ------------------------------------------------------

    async def change(self, action: str, fn: Callable[[Any], Any]) -> Any:
        """Apply ``fn`` to a copy of the bundle, save it, then serve it."""
        assert self.write_lock is not None
        async with self.write_lock:
            current = self.bundle

            def work() -> tuple[Any, Any]:
                from ..bundle import check_writable

                check_writable(self.path)  # a built-in bundle: before any work
                new = current.copy()
                result = fn(new)
                new.save(self.path)
                return new, result

            try:
                new, result = await asyncio.to_thread(work)
            except ManyheadsError as exc:
                raise _http_error(exc) from exc
            self._serve(new)
            self.metrics.updates.labels(action).inc()
            log.info("head change: %s (generation %s)", action, new.generation)
            return result

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
            new = Bundle.load(self.path, cache=self.cache, trunk=old.trunk, limits=old.limits)
        if new is None or new.trunk_reference != old.trunk_reference:
            new = Bundle.load(self.path, cache=self.cache, limits=old.limits)
        _warm(new)
        return new


async def _read_body(request: Any, limit: int, timeout: float = 30.0) -> bytes:
    """The whole body (read to its end even when too large: a 413 sent before the body
    is read can reach the client as a connection reset); a client that sends nothing
    for ``timeout`` seconds mid-body gets a 408."""
    chunks: list[bytes] = []
    size = 0
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), timeout)
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise HTTPError(
                408, "body_timeout", f"no part of the request body came for {timeout:g} s"
            ) from None
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
    if size > limit:
        raise HTTPError(413, "body_too_large", f"the request body is over {limit} bytes")
    return b"".join(chunks)


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise HTTPError(400, "bad_encoding", "the request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise HTTPError(400, "bad_json", f"the request body is not JSON: {exc}") from None


async def _parse_json_off_loop(body: bytes) -> Any:
    """:func:`_parse_json`, in a worker thread for a large body (the loop keeps answering)."""
    if len(body) < 256 * 1024:
        return _parse_json(body)
    return await asyncio.to_thread(_parse_json, body)


def _string_list(value: Any, what: str, code: str) -> list[str]:
    """A list of strings, each valid Unicode (JSON can carry lone surrogates)."""
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise HTTPError(422, code, f"'{what}' must be a list of strings")
    for i, text in enumerate(value):
        problem = unicode_problem(text)
        if problem is not None:
            raise HTTPError(422, code, f"'{what}' #{i} {problem}")
    return value


def _check_lengths(texts: list[str], max_texts: int, max_chars: int | None) -> None:
    if not texts:
        raise HTTPError(422, "empty_texts", "'texts' is empty")
    if len(texts) > max_texts:
        raise HTTPError(413, "too_many_texts", f"{len(texts)} texts; at most {max_texts}")
    if max_chars is not None:
        for i, t in enumerate(texts):
            if len(t) > max_chars:
                raise HTTPError(
                    413, "text_too_long", f"text #{i} is longer than {max_chars} characters"
                )


def _models() -> dict[str, Any]:
    """Pydantic models describing the JSON bodies (for the OpenAPI schema; bodies are
    checked by hand so every mistake gets its own message)."""
    from pydantic import BaseModel, Field

    class PredictRequest(BaseModel):
        texts: list[str] = Field(description="Texts to classify (1 to max_texts).")
        heads: list[str] | None = Field(None, description="Subset of heads (default: all).")

    class PredictResponse(BaseModel):
        results: list[dict[str, Any]] = Field(
            description="Per text, {head: answer}: multiclass / binary heads answer "
            "{label, score, scores}, multilabel heads {labels, scores}."
        )
        seconds: float

    class TrainRequest(BaseModel):
        texts: list[str]
        labels: list[Any] = Field(description="One per text; a list of labels for multilabel.")
        kind: Literal["multiclass", "binary", "multilabel"] = "multiclass"
        head: Literal["linear", "mlp", "auto"] = "linear"
        groups: list[str | int] | None = Field(
            None, description="Group of each text (kept together in the validation split)."
        )

    class TrainResponse(BaseModel):
        name: str
        kind: str
        n_classes: int
        n_train: int
        n_val: int
        metrics: dict[str, Any]
        seconds: float
        replaced: bool

    class HeadPayload(BaseModel):
        record: dict[str, Any] = Field(description="The head's JSON record, as bundles store it.")
        tensors: str = Field(description="The head's safetensors file, base64-encoded.")

    class HeadInfo(BaseModel):
        name: str
        kind: str
        labels: list[Any]
        metrics: dict[str, Any]

    class HeadsResponse(BaseModel):
        heads: list[HeadInfo]

    class HeadChange(BaseModel):
        name: str
        action: str
        heads: list[str]

    class ErrorDetail(BaseModel):
        code: str
        message: str

    class ErrorResponse(BaseModel):
        error: ErrorDetail

    return {m.__name__: m for m in (
        PredictRequest, PredictResponse, TrainRequest, TrainResponse, HeadPayload,
        HeadInfo, HeadsResponse, HeadChange, ErrorResponse,
    )}  # fmt: skip


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
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from ..bundle import HEAD_TYPES, check_head_name
    from .payload import head_from_json, head_to_json

    if config is None:
        config = ServeConfig(**options)
    elif options:
        raise ConfigError("give either config or keyword options, not both")
    from ..bundle import bundle_folder

    service = Service(bundle_folder(bundle_path), config, cache)
    if preload:
        service.preload()
    window = config.long_texts == "window"
    models = _models()

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        await service.start()
        watcher = asyncio.get_running_loop().create_task(service.watch()) if config.watch else None
        app.state.service = service
        yield
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await service.stop()

    from .. import __version__

    app = fastapi.FastAPI(
        title="manyheads",
        version=__version__,
        description="Every head of a manyheads bundle from one trunk pass.",
        lifespan=lifespan,
    )
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

    errors = {s: {"model": models["ErrorResponse"]} for s in (400, 401, 404, 409, 413, 422, 503)}

    def body_schema(name: str) -> dict[str, Any]:
        schema = models[name].model_json_schema()
        return {
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
        }

    def need_ready() -> Any:
        if not service.ready:
            raise HTTPError(503, "not_ready", "the bundle is still loading")
        return service.bundle

    def head_name(name: str) -> str:
        try:
            return check_head_name(name)
        except ManyheadsError as exc:
            raise _http_error(exc) from exc

    async def write_body(request: Request) -> bytes:
        """A write endpoint's body, read whole before the key and readiness are judged."""
        body = await _read_body(request, config.max_body_bytes, config.body_timeout_s)
        need_key(request, write=True)
        need_ready()
        return body

    def need_key(request: Request, *, write: bool) -> None:
        if service.keys.check(request.headers.get("authorization")):
            return
        if write and not service.keys.configured:
            raise HTTPError(
                401,
                "unauthorized",
                "write endpoints need an API key: start the server with --api-key-file "
                "and send 'Authorization: Bearer KEY'",
            )
        if write or service.keys.configured:
            raise HTTPError(
                401, "unauthorized", "missing or invalid API key ('Authorization: Bearer KEY')"
            )

    @app.get("/", include_in_schema=False)
    async def playground() -> Any:
        page = resources.files(__package__).joinpath("playground.html").read_text("utf-8")
        return HTMLResponse(page)

    @app.get("/healthz", summary="Liveness: the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="Readiness: trunk loaded and warmed", responses=errors)
    async def readyz() -> Any:
        bundle = need_ready()
        return {"status": "ready", "heads": list(bundle.heads)}

    @app.get("/metrics", summary="Prometheus metrics", responses=errors)
    async def metrics(request: Request) -> Any:
        need_key(request, write=False)
        body, content_type = service.metrics.render()
        return Response(body, media_type=content_type)

    @app.get(
        "/v1/heads",
        summary="Heads: names, kinds, labels, validation metrics",
        response_model=models["HeadsResponse"],
        responses=errors,
    )
    async def list_heads(request: Request) -> Any:
        need_key(request, write=False)
        bundle = need_ready()
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

    @app.get(
        "/v1/heads/{name}",
        summary="One head as JSON record + base64 safetensors (the body PUT takes)",
        response_model=models["HeadPayload"],
        responses=errors,
    )
    async def get_head(name: str, request: Request) -> Any:
        need_key(request, write=False)
        bundle = need_ready()
        try:
            record, tensors = bundle.export_head(name)
        except ManyheadsError as exc:
            raise _http_error(exc) from exc
        return head_to_json(record, tensors)

    @app.put(
        "/v1/heads/{name}",
        summary="Install a head trained elsewhere (same trunk fingerprint)",
        response_model=models["HeadChange"],
        responses=errors,
        openapi_extra=body_schema("HeadPayload"),
    )
    async def put_head(name: str, request: Request) -> Any:
        doc = await _parse_json_off_loop(await write_body(request))
        head_name(name)
        try:
            record, tensors = head_from_json(doc)
        except ManyheadsError as exc:
            raise _http_error(exc) from exc
        await service.change("put", lambda b: b.import_head(name, record, tensors))
        return {"name": name, "action": "put", "heads": list(service.bundle.heads)}

    @app.delete(
        "/v1/heads/{name}",
        summary="Remove a head",
        response_model=models["HeadChange"],
        responses=errors,
    )
    async def delete_head(name: str, request: Request) -> Any:
        await write_body(request)
        await service.change("delete", lambda b: b.remove_head(name))
        return {"name": name, "action": "delete", "heads": list(service.bundle.heads)}

    @app.post(
        "/v1/heads/{name}/train",
        summary="Train (or replace) a head from texts and labels",
        response_model=models["TrainResponse"],
        responses=errors,
        openapi_extra=body_schema("TrainRequest"),
    )
    async def train_head(name: str, request: Request) -> Any:
        doc = await _parse_json_off_loop(await write_body(request))
        if not isinstance(doc, dict):
            raise HTTPError(422, "bad_request", "the body must be a JSON object with 'texts'")
        texts = _string_list(doc.get("texts"), "texts", "bad_texts")
        _check_lengths(texts, config.max_train_texts, None if window else config.max_chars)
        labels = doc.get("labels")
        if not isinstance(labels, list) or len(labels) != len(texts):
            raise HTTPError(422, "bad_labels", "'labels' must be a list, one label per text")
        kind = doc.get("kind", "multiclass")
        if kind not in KINDS:
            raise HTTPError(422, "bad_kind", f"'kind' must be one of {', '.join(KINDS)}")
        head = doc.get("head", "linear")
        if head not in HEAD_TYPES:
            raise HTTPError(422, "bad_head_type", f"'head' must be one of {', '.join(HEAD_TYPES)}")
        groups = doc.get("groups")
        if groups is not None and (
            not isinstance(groups, list)
            or len(groups) != len(texts)
            or not all(isinstance(g, str | int) and not isinstance(g, bool) for g in groups)
        ):
            raise HTTPError(
                422, "bad_groups", "'groups' must be a list of strings or integers, one per text"
            )
        if groups is not None:
            _string_list([g for g in groups if isinstance(g, str)], "groups", "bad_groups")
        head_name(name)
        replaced = name in service.bundle.heads
        summary = await service.change(
            "train",
            lambda b: b.fit_head(name, texts, labels, kind, head=head, groups=groups),
        )
        return {
            "name": name,
            "kind": summary.kind,
            "n_classes": summary.n_classes,
            "n_train": summary.n_train,
            "n_val": summary.n_val,
            "metrics": summary.metrics,
            "seconds": round(summary.seconds + summary.embed_seconds, 6),
            "replaced": replaced,
        }

    @app.post(
        "/v1/predict",
        summary="Every head's answer (or a subset's) for each text, from one trunk pass",
        response_model=models["PredictResponse"],
        responses=errors,
        openapi_extra=body_schema("PredictRequest"),
    )
    async def predict(request: Request) -> Any:
        # read whole, then judge it
        body = await _read_body(request, config.max_body_bytes, config.body_timeout_s)
        need_key(request, write=False)
        doc = await _parse_json_off_loop(body)
        if not isinstance(doc, dict):
            raise HTTPError(422, "bad_request", "the body must be a JSON object with 'texts'")
        texts = _string_list(doc.get("texts"), "texts", "bad_texts")
        _check_lengths(texts, config.max_texts, None if window else config.max_chars)
        heads = doc.get("heads")
        if heads is not None and (
            not isinstance(heads, list) or not heads or not all(isinstance(h, str) for h in heads)
        ):
            raise HTTPError(422, "bad_heads", "'heads' must be a non-empty list of head names")
        bundle = need_ready()
        if heads is not None:  # refused before the pass; checked again after it
            unknown = [h for h in heads if h not in bundle.heads]
            if unknown:
                raise HTTPError(
                    404,
                    "unknown_head",
                    f"unknown head {unknown[0]!r}; the bundle has: " + ", ".join(bundle.heads),
                )
        t0 = time.perf_counter()
        assert service.batcher is not None
        try:
            answers = await service.batcher.submit(texts)
        except ManyheadsError as exc:
            raise _http_error(exc) from exc
        if heads is not None:
            known = answers[0].keys()
            unknown = [h for h in heads if h not in known]
            if unknown:
                raise HTTPError(
                    404,
                    "unknown_head",
                    f"unknown head {unknown[0]!r}; the bundle has: " + ", ".join(known),
                )
            answers = [{h: a[h] for h in heads} for a in answers]
        return JSONResponse({"results": answers, "seconds": round(time.perf_counter() - t0, 6)})

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
            route = getattr(scope.get("route"), "path", None) or "(unmatched)"
            self.metrics.observe_request(
                scope["method"], route, status, time.perf_counter() - start
            )


__all__ = ["HTTPError", "MicroBatcher", "ServeConfig", "Service", "create_app"]
