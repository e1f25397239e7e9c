"""HTTP routes of the data port: the OpenAI-compatible API and health checks.

Each API route is an adapter (its wire format ↔ the canonical request and answer) handed to
one serving function, ``_serve``: authenticate, read the body, parse it, walk the tiers (the
pipeline, or the embeddings walk), and send the reply as JSON or as an SSE stream.
Disconnects and shutdown are handled in connections.py.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from litestar.response import Stream

from .canonical import GatewayRequest, Reply, Wire
from .chat import CHAT, COMPLETION
from .connections import ClientDisconnected, StreamWatch
from .embeddings import EMBEDDINGS, embed
from .errors import APIError
from .pipeline import Pipeline
from .runtime import Runtime

__all__ = ["Walk", "error_response", "routes", "serve"]

_encode = msgspec.json.encode
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

#: A tier walk: the pipeline's (``Pipeline.handle``) or one of its own (embeddings).
Walk = Callable[..., Awaitable[Reply]]


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await serve(request, CHAT, "/v1/chat/completions")


@post("/v1/completions", status_code=200)
async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await serve(request, COMPLETION, "/v1/completions")


@post("/v1/embeddings", status_code=200)
async def embeddings(request: Request[Any, Any, Any]) -> Response[Any]:
    return await serve(request, EMBEDDINGS, "/v1/embeddings", walk=embed)


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[Any]:
    runtime = _runtime(request)
    try:
        runtime.authenticate(request.headers.get("authorization"))
    except APIError as exc:
        return error_response(exc)
    data = [backend.describe() for backend in runtime.backends.values()]
    return _json({"object": "list", "data": data})


@get("/v1/models/{model_id:path}")
async def get_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    runtime = _runtime(request)
    try:
        runtime.authenticate(request.headers.get("authorization"))
    except APIError as exc:
        return error_response(exc)
    backend = runtime.backends.get(model_id.lstrip("/"))
    if backend is None:
        return error_response(
            APIError(
                404, f"The model `{model_id.lstrip('/')}` does not exist.", code="model_not_found"
            )
        )
    return _json(backend.describe())


@get("/healthz")
async def healthz() -> Response[Any]:
    return _json({"status": "ok"})


@get("/readyz")
async def readyz(request: Request[Any, Any, Any]) -> Response[Any]:
    state = await _runtime(request).readiness()
    # "failed": a model could not load and will not be retried (restart to try again)
    status = "ready" if state["ready"] else "failed" if state.get("failed") else "loading"
    return _json({"status": status, **state}, 200 if state["ready"] else 503)


routes = [chat_completions, completions, embeddings, list_models, get_model, healthz, readyz]


def error_response(exc: APIError, cache: str = "bypass", wire: Wire = CHAT) -> Response[Any]:
    return Response(
        wire.error_json(exc),
        status_code=exc.status,
        media_type="application/json",
        headers={"x-cache": cache, **exc.headers},
    )


async def serve(
    request: Request[Any, Any, Any], wire: Wire, route: str, walk: Walk = Pipeline.handle
) -> Response[Any]:
    """Answer one API request: ``wire`` parses it and writes its errors, ``walk`` answers it."""
    runtime = _runtime(request)
    started = time.perf_counter()
    model = ""
    try:
        parsed = await _parse(request, runtime, wire)
        model = parsed.model if parsed.model in runtime.backends else ""
        with runtime.connections.abortable():
            reply = await walk(
                runtime.pipeline,
                parsed,
                wire,
                auth=request.headers.get("authorization"),
                watch=runtime.connections.guard(request),
            )
    except APIError as exc:
        _record(runtime, route, model, "bypass", exc.status, started)
        return error_response(exc, wire=wire)
    except HTTPException as exc:  # raised by litestar itself, e.g. 413 for an oversized body
        _record(runtime, route, model, "bypass", exc.status_code, started)
        return error_response(_from_http(exc), wire=wire)
    except ClientDisconnected:
        _record(runtime, route, model, "bypass", 499, started)
        return Response(b"", status_code=499)
    return _send(runtime, reply, wire, route, model, started)


# ---------------------------------------------------------------------------------------------
# helpers


async def _parse(request: Request[Any, Any, Any], runtime: Runtime, wire: Wire) -> GatewayRequest:
    tenant = runtime.authenticate(request.headers.get("authorization"))
    raw = await request.body()
    return wire.parse(raw, request.headers, tenant)


def _send(
    runtime: Runtime, reply: Reply, wire: Wire, route: str, model: str, started: float
) -> Response[Any]:
    metrics = runtime.metrics
    if reply.saved_tokens:
        metrics.saved_tokens.labels(model).inc(reply.saved_tokens)
    if reply.coalesced:
        metrics.coalesced.labels(model).inc()
    headers = {"x-cache": reply.cache, **reply.headers}
    if reply.stream is None:
        _record(runtime, route, model, reply.cache, 200, started)
        return Response(_encode(reply.body), media_type="application/json", headers=headers)
    metrics.requests.labels(route, model, reply.cache, "200").inc()

    def on_first() -> None:
        metrics.latency.labels(route, reply.cache).observe(time.perf_counter() - started)

    def on_error(code: str) -> None:
        metrics.stream_errors.labels(route, model, code).inc()

    watch = StreamWatch()
    watch.events = runtime.connections.send(reply, watch, wire.error_event, on_first, on_error)
    return Stream(watch.events, media_type="text/event-stream", headers={**_SSE_HEADERS, **headers})


def _record(
    runtime: Runtime, route: str, model: str, cache: str, status: int, started: float
) -> None:
    metrics = runtime.metrics
    metrics.requests.labels(route, model, cache, str(status)).inc()
    metrics.latency.labels(route, cache).observe(time.perf_counter() - started)


def _from_http(exc: HTTPException) -> APIError:
    status = exc.status_code
    if status == 413:
        return APIError(413, "The request body is too large.", code="request_too_large")
    return APIError(status, str(exc.detail))


def _runtime(request: Request[Any, Any, Any]) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _json(obj: Any, status: int = 200) -> Response[Any]:
    return Response(_encode(obj), status_code=status, media_type="application/json")
