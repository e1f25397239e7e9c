"""HTTP routes of the data port: the OpenAI-compatible API and health checks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from litestar.response import Stream

from . import messages
from .errors import APIError
from .messages_bridge import messages_backend
from .pipeline import Reply
from .requests import GatewayRequest, Kind, parse_request
from .runtime import SHUTTING_DOWN, Runtime, StreamWatch
from .sse import DONE

__all__ = ["ClientDisconnected", "error_response", "routes"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_encode = msgspec.json.encode
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _serve(request, "chat", "/v1/chat/completions")


@post("/v1/completions", status_code=200)
async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _serve(request, "completion", "/v1/completions")


@post("/v1/embeddings", status_code=200)
async def embeddings(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _serve(request, "embedding", "/v1/embeddings")


@post("/v1/messages", status_code=200)
async def create_message(request: Request[Any, Any, Any]) -> Response[Any]:
    """Anthropic Messages: Anthropic's error bodies, ``x-api-key`` or a bearer token."""
    return await _serve(request, "messages", "/v1/messages")


@post("/v1/messages/count_tokens", status_code=200)
async def count_message_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    """The input tokens a Messages request would use (never cached, never a model call)."""
    runtime = _runtime(request)
    try:
        check, forward = messages.client_credential(request.headers)
        tenant = runtime.authenticate(check)
        parsed = messages.parse_count_tokens(await request.body(), request.headers, tenant)
        backend = runtime.pipeline.backends.get(parsed.model)
        if backend is None:
            raise APIError(404, f"model: {parsed.model}", type="not_found_error")
        count = await messages_backend(backend).count_tokens(parsed, forward)
    except APIError as exc:
        return _anthropic_error(exc)
    except HTTPException as exc:
        return _anthropic_error(_from_http(exc))
    return _json({"input_tokens": count})


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


routes = [
    chat_completions,
    completions,
    embeddings,
    create_message,
    count_message_tokens,
    list_models,
    get_model,
    healthz,
    readyz,
]


def error_response(exc: APIError, cache: str = "bypass") -> Response[Any]:
    return Response(
        exc.json(),
        status_code=exc.status,
        media_type="application/json",
        headers={"x-cache": cache, **exc.headers},
    )


# ---------------------------------------------------------------------------------------------
# helpers


async def _serve(request: Request[Any, Any, Any], kind: Kind, route: str) -> Response[Any]:
    runtime = _runtime(request)
    started = time.perf_counter()
    model = ""
    failed = _anthropic_error if kind == "messages" else error_response
    try:
        check, forward = _credential(kind, request)
        tenant = runtime.authenticate(check)
        raw = await request.body()
        parsed = _parse(kind, raw, request, tenant)
        model = parsed.model if parsed.model in runtime.backends else ""
        with _abortable(runtime):
            reply = await runtime.pipeline.handle(
                parsed,
                auth=forward,
                watch=lambda awaitable: _until_disconnect(request, awaitable),
            )
    except APIError as exc:
        _record(runtime, route, model, "bypass", exc.status, started)
        return failed(exc)
    except HTTPException as exc:  # raised by litestar itself, e.g. 413 for an oversized body
        _record(runtime, route, model, "bypass", exc.status_code, started)
        return failed(_from_http(exc))
    except ClientDisconnected:
        _record(runtime, route, model, "bypass", 499, started)
        return Response(b"", status_code=499)
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
    watch = StreamWatch()
    watch.events = _observed(reply, runtime, route, model, started, watch)
    return Stream(watch.events, media_type="text/event-stream", headers={**_SSE_HEADERS, **headers})


async def _observed(
    reply: Reply, runtime: Runtime, route: str, model: str, started: float, watch: StreamWatch
) -> AsyncIterator[bytes]:
    """``reply.stream``, timing its first byte and counting how it ended if not normally.

    ``watch`` tells the runtime's watchdog while the stream waits for its client to take an
    event (a client that stopped reading holds it there: see ``Runtime._end_stuck_streams``).
    """
    assert reply.stream is not None
    metrics, stream = runtime.metrics, reply.stream
    first, ended, done = True, False, False
    loop = asyncio.get_running_loop()
    watch.task = asyncio.current_task()
    runtime.streams.add(watch)
    try:
        try:
            with _abortable(runtime, enabled=reply.outcome is not None):  # a model's stream
                async for piece in stream:
                    if first:
                        first = False
                        elapsed = time.perf_counter() - started
                        metrics.latency.labels(route, reply.cache).observe(elapsed)
                    done = piece.endswith((DONE, messages.MESSAGE_STOP))
                    watch.since = loop.time()
                    yield piece
                    watch.since = None
        except APIError as exc:  # the shutdown deadline passed while it streamed
            assert reply.outcome is not None
            if not done:  # (else only the relay's cleanup after [DONE] was cut short)
                reply.outcome.error = exc.code
                yield reply.error_event(exc)
        ended = True
    finally:
        runtime.streams.discard(watch)
        error = reply.outcome.error if reply.outcome is not None else None
        if error is None and not ended:
            error = "client_stuck" if watch.stuck else "client_disconnected"
        if error is not None:
            metrics.stream_errors.labels(route, model, error).inc()
        aclose = getattr(stream, "aclose", None)
        if aclose is not None and not ended:
            await aclose()


@contextlib.contextmanager
def _abortable(runtime: Runtime, *, enabled: bool = True) -> Iterator[None]:
    """Let the shutdown deadline stop this task's wait with a 503 ``shutting_down`` error.

    NOTE: ``Runtime.abort_in_flight`` cancels the task; the cancellation is turned into an
    ``APIError`` here (and the task uncancelled), so the client gets an OpenAI error body or
    event rather than a connection cut by uvicorn's own deadline, which comes later.
    """
    task = asyncio.current_task()
    if not enabled or task is None:
        yield
        return
    runtime.in_flight.add(task)
    try:
        yield
    except asyncio.CancelledError as exc:
        if not (runtime.aborting and exc.args == (SHUTTING_DOWN,)):
            raise
        task.uncancel()
        raise APIError(
            503, "The gateway is shutting down; send the request again.", code="shutting_down"
        ) from None
    finally:
        runtime.in_flight.discard(task)


async def _until_disconnect(request: Request[Any, Any, Any], awaitable: Any) -> Any:
    """Await ``awaitable`` unless the client disconnects first; then cancel it.

    NOTE: the body has been read, so the next ASGI ``receive`` returns only when the client goes
    away (``http.disconnect``); that is what cancels an upstream call nobody waits for.
    """
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        raise
    finally:
        watcher.cancel()
    if work in done:
        return work.result()
    work.cancel()
    raise ClientDisconnected


async def _wait_disconnect(request: Request[Any, Any, Any]) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _credential(kind: Kind, request: Request[Any, Any, Any]) -> tuple[str | None, str | None]:
    """(the Authorization the gateway checks, the credential a backend may forward)."""
    if kind == "messages":
        return messages.client_credential(request.headers)
    authorization = request.headers.get("authorization")
    return authorization, authorization


def _parse(kind: Kind, raw: bytes, request: Request[Any, Any, Any], tenant: str) -> GatewayRequest:
    if kind == "messages":
        return messages.parse_messages(raw, request.headers, tenant)
    return parse_request(kind, raw, request.headers, tenant)


def _anthropic_error(exc: APIError, cache: str = "bypass") -> Response[Any]:
    body = messages.error_json(exc)
    headers = {"x-cache": cache, **exc.headers}
    return Response(body, status_code=exc.status, media_type="application/json", headers=headers)


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
