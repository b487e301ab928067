"""The service's routes. Each reads its body whole, checks it against its model
(:mod:`~manyheads.serve.schemas`), and calls the service state
(:class:`~manyheads.serve.state.Service`, in ``request.app.state.service``)."""

from __future__ import annotations

import asyncio
import json
import time
import typing
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from ..errors import ManyheadsError
from ..heads.kinds import check_head_name
from . import schemas
from .errors import HTTPError, http_error
from .payload import head_from_json, head_to_json
from .state import Service

__all__ = ["router"]

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": schemas.ErrorResponse} for s in (400, 401, 404, 409, 413, 422, 503)
}


def _body_schema(model: Any) -> dict[str, Any]:
    if isinstance(model, type) and hasattr(model, "model_json_schema"):
        schema = model.model_json_schema()
    else:  # a union of models: either body
        schema = {"anyOf": [m.model_json_schema() for m in typing.get_args(model)]}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def read_body(request: Request, limit: int, timeout: float = 30.0) -> bytes:
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


MAX_DEPTH = 64  # levels of arrays and objects a request body may nest
_TOO_DEEP = f"the request body nests arrays and objects more than {MAX_DEPTH} levels deep"


def _parse_json(body: bytes) -> Any:
    try:
        doc = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise HTTPError(400, "bad_encoding", "the request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise HTTPError(400, "bad_json", f"the request body is not JSON: {exc}") from None
    except RecursionError:  # nested deeper than the parser goes
        raise HTTPError(400, "too_deep", _TOO_DEEP) from None
    if _deeper_than(doc, MAX_DEPTH):
        raise HTTPError(400, "too_deep", _TOO_DEEP)
    return doc


def _deeper_than(doc: Any, limit: int) -> bool:
    """Whether ``doc`` (parsed JSON) nests arrays and objects more than ``limit`` levels
    deep (walked without recursion)."""
    stack = [(doc, 1)] if isinstance(doc, list | dict) else []
    while stack:
        node, depth = stack.pop()
        values = node.values() if isinstance(node, dict) else node
        if depth > limit:
            return True
        stack.extend((v, depth + 1) for v in values if isinstance(v, list | dict))
    return False


async def _parse(model: type[Any], body: bytes) -> Any:
    """``body`` as JSON (parsed in a worker thread when large: the loop keeps answering),
    checked against ``model``."""
    doc = (
        _parse_json(body) if len(body) < 256 * 1024 else await asyncio.to_thread(_parse_json, body)
    )
    try:
        return schemas.parse(model, doc)
    except schemas.RequestProblem as exc:
        raise HTTPError(422, exc.code, exc.message) from None


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _ready(service: Service) -> Any:
    if not service.ready:
        raise HTTPError(503, "not_ready", "the bundle is still loading")
    return service.bundle


def _need_key(request: Request, *, write: bool) -> None:
    keys = _service(request).keys
    if keys.check(request.headers.get("authorization")):
        return
    if write and not keys.configured:
        raise HTTPError(
            401,
            "unauthorized",
            "write endpoints need an API key: start the server with --api-key-file "
            "and send 'Authorization: Bearer KEY'",
        )
    if write or keys.configured:
        raise HTTPError(
            401, "unauthorized", "missing or invalid API key ('Authorization: Bearer KEY')"
        )


async def _write_body(request: Request) -> bytes:
    """A write endpoint's body, read whole before the key and readiness are judged."""
    service = _service(request)
    config = service.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    _need_key(request, write=True)
    _ready(service)
    return body


def _head_name(name: str) -> str:
    try:
        return check_head_name(name)
    except ManyheadsError as exc:
        raise http_error(exc) from exc


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


def _unknown_head(heads: list[str], known: Any) -> HTTPError | None:
    unknown = [h for h in heads if h not in known]
    if not unknown:
        return None
    return HTTPError(
        404, "unknown_head", f"unknown head {unknown[0]!r}; the bundle has: " + ", ".join(known)
    )


async def playground() -> Any:
    page = resources.files(__package__).joinpath("playground.html").read_text("utf-8")
    return HTMLResponse(page)


async def healthz() -> dict[str, str]:
    return {"status": "ok"}


async def readyz(request: Request) -> Any:
    bundle = _ready(_service(request))
    return {"status": "ready", "heads": list(bundle.heads)}


async def metrics(request: Request) -> Any:
    _need_key(request, write=False)
    # in a worker thread: the drift gauges count each head's window
    body, content_type = await asyncio.to_thread(_service(request).metrics.render)
    return Response(body, media_type=content_type)


async def list_heads(request: Request) -> Any:
    _need_key(request, write=False)
    bundle = _ready(_service(request))
    try:
        counts = await asyncio.to_thread(bundle.feedback_counts)
    except ManyheadsError:
        counts = {}  # a bundle not saved to a folder of its own keeps none
    return {
        "heads": [
            {
                "name": name,
                "kind": info.get("kind"),
                "labels": bundle.labels(name),
                "metrics": info.get("metrics", {}),
                "generation": info.get("generation", 1),
                "last_update": info.get("last_update"),
                "feedback": counts.get(name, {"total": 0, "pending": 0, "new": 0}),
            }
            for name, info in bundle.head_info.items()
        ]
    }


async def feedback(request: Request) -> Any:
    service = _service(request)
    config = service.config
    rows: schemas.FeedbackRequest = await _parse(
        schemas.FeedbackRequest, await _write_body(request)
    )
    items = rows.root
    if not items:
        raise HTTPError(422, "bad_feedback", "no feedback rows given")
    if len(items) > config.max_texts:
        raise HTTPError(
            413, "too_many_rows", f"{len(items)} feedback rows; at most {config.max_texts}"
        )
    _check_lengths([r.text for r in items], config.max_texts, config.max_chars)
    heads = sorted({h for r in items for h in r.labels})
    labels = {h: [r.labels.get(h) for r in items] for h in heads}
    kept = await service.add_feedback([r.text for r in items], labels)
    return {"kept": kept, "rows": len(items)}


async def rollback_head(name: str, request: Request) -> Any:
    body = await _write_body(request)
    asked = (
        await _parse(schemas.RollbackRequest, body)
        if body.strip()
        else schemas.RollbackRequest(to=None)
    )
    _head_name(name)
    service = _service(request)
    generation = await service.change(
        "rollback", lambda b: b.rollback_head(name, asked.to, save=False)
    )
    return {"name": name, "action": "rollback", "generation": generation}


async def drift(request: Request) -> Any:
    _need_key(request, write=False)
    service = _service(request)
    _ready(service)
    rows = await asyncio.to_thread(service.drift_report)
    return {
        "window": service.drift.settings.window,
        "alarm": any(row["alarm"] for row in rows.values()),
        "heads": [{"name": name, **row} for name, row in rows.items()],
    }


async def get_head(name: str, request: Request) -> Any:
    _need_key(request, write=False)
    bundle = _ready(_service(request))
    try:
        record, tensors = bundle.export_head(name)
    except ManyheadsError as exc:
        raise http_error(exc) from exc
    return head_to_json(record, tensors)


async def put_head(name: str, request: Request) -> Any:
    body = await _write_body(request)
    doc = (
        _parse_json(body) if len(body) < 256 * 1024 else await asyncio.to_thread(_parse_json, body)
    )
    _head_name(name)
    service = _service(request)
    if isinstance(doc, dict) and "labels" in doc and "record" not in doc:  # from names
        try:
            asked = schemas.parse_named(doc)
        except schemas.RequestProblem as exc:
            raise HTTPError(422, exc.code, exc.message) from None
        await service.change(
            "put",
            lambda b: b.add_head_from_labels(
                name, asked.labels, asked.kind, path_sep=asked.path_sep
            ),
        )
        return {"name": name, "action": "put", "heads": list(service.bundle.heads)}
    try:
        record, tensors = head_from_json(doc)
    except ManyheadsError as exc:
        raise http_error(exc) from exc
    await service.change("put", lambda b: b.import_head(name, record, tensors))
    return {"name": name, "action": "put", "heads": list(service.bundle.heads)}


async def delete_head(name: str, request: Request) -> Any:
    await _write_body(request)
    service = _service(request)
    await service.change("delete", lambda b: b.remove_head(name))
    return {"name": name, "action": "delete", "heads": list(service.bundle.heads)}


async def train_head(name: str, request: Request) -> Any:
    service = _service(request)
    config = service.config
    asked: schemas.TrainRequest = await _parse(schemas.TrainRequest, await _write_body(request))
    window = config.long_texts == "window"
    _check_lengths(asked.texts, config.max_train_texts, None if window else config.max_chars)
    _head_name(name)
    replaced = name in service.bundle.heads
    summary = await service.change(
        "train",
        lambda b: b.fit_head(
            name, asked.texts, asked.labels, asked.kind, head=asked.head, groups=asked.groups
        ),
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


async def predict(request: Request) -> Any:
    service = _service(request)
    config = service.config
    # read whole, then judge it
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    _need_key(request, write=False)
    asked: schemas.PredictRequest = await _parse(schemas.PredictRequest, body)
    window = config.long_texts == "window"
    _check_lengths(asked.texts, config.max_texts, None if window else config.max_chars)
    bundle = _ready(service)
    heads = asked.heads
    if heads is not None:  # refused before the pass; checked again after it
        unknown = _unknown_head(heads, bundle.heads)
        if unknown is not None:
            raise unknown
    t0 = time.perf_counter()
    assert service.batcher is not None
    try:
        answers = await service.batcher.submit(asked.texts)
    except ManyheadsError as exc:
        raise http_error(exc) from exc
    if heads is not None:
        unknown = _unknown_head(heads, answers[0].keys())
        if unknown is not None:  # the head went while the request waited
            raise unknown
        answers = [{h: a[h] for h in heads} for a in answers]
    return JSONResponse({"results": answers, "seconds": round(time.perf_counter() - t0, 6)})


def _route(method: str, path: str, endpoint: Any, summary: str, *models: Any) -> None:
    """Register ``endpoint``: ``models``, its answer's model and its body's."""
    options: dict[str, Any] = {"summary": summary, "responses": ERRORS}
    model, body = (*models, None, None)[:2]
    if model is not None:
        options["response_model"] = model
    if body is not None:
        options["openapi_extra"] = _body_schema(body)
    router.add_api_route(path, endpoint, methods=[method], **options)


router.add_api_route("/", playground, methods=["GET"], include_in_schema=False)
router.add_api_route("/healthz", healthz, methods=["GET"], summary="Liveness: the process answers")
_route("GET", "/readyz", readyz, "Readiness: trunk loaded and warmed")
_route("GET", "/metrics", metrics, "Prometheus metrics")
_route(
    "GET",
    "/v1/heads",
    list_heads,
    "Heads: names, kinds, labels, validation metrics",
    schemas.HeadsResponse,
)
_route(
    "GET",
    "/v1/drift",
    drift,
    "Each head's drift: its last answers against its reference",
    schemas.DriftResponse,
)
_route(
    "GET",
    "/v1/heads/{name}",
    get_head,
    "One head as JSON record + base64 safetensors (the body PUT takes)",
    schemas.HeadPayload,
)
_route(
    "PUT",
    "/v1/heads/{name}",
    put_head,
    "Install a head trained elsewhere (same trunk fingerprint), or make one from label names",
    schemas.HeadChange,
    schemas.HeadPayload | schemas.HeadFromLabels,
)
_route("DELETE", "/v1/heads/{name}", delete_head, "Remove a head", schemas.HeadChange)
_route(
    "POST",
    "/v1/heads/{name}/train",
    train_head,
    "Train (or replace) a head from texts and labels",
    schemas.TrainResponse,
    schemas.TrainRequest,
)
_route(
    "POST",
    "/v1/heads/{name}/rollback",
    rollback_head,
    "Make an earlier generation of a head current again (default: the previous one)",
    schemas.RollbackResponse,
    schemas.RollbackRequest,
)
_route(
    "POST",
    "/v1/feedback",
    feedback,
    "Keep corrections (the right labels of texts) with the bundle; 200 once on disk",
    schemas.FeedbackResponse,
    schemas.FeedbackRequest,
)
_route(
    "POST",
    "/v1/predict",
    predict,
    "Every head's answer (or a subset's) for each text, from one trunk pass",
    schemas.PredictResponse,
    schemas.PredictRequest,
)
