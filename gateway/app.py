"""The app factory: ``create_app(config)`` returns the Litestar app of the data port.

    >>> app = create_app(load_config("cachegate.yaml"))
    >>> uvicorn.run(app, host="127.0.0.1", port=8080)

The runtime (backends, caches, models) is opened in the app's lifespan and closed with it. When
an admin port is configured, ``create_admin_app(runtime)`` serves /metrics and /admin/* there.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.types import Message, Scope

from .admin import admin_routes
from .api import error_response, routes
from .canonical import Wire
from .chat import CHAT
from .config import Config
from .connections import closing
from .errors import APIError
from .messages_bridge import MESSAGES
from .observe import Seen, observe, request_id
from .runtime import LocalFactory, Runtime

__all__ = ["create_admin_app", "create_app"]

log = logging.getLogger(__name__)


def create_app(
    config: Config,
    *,
    runtime: Runtime | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    local_factory: LocalFactory | None = None,
) -> Litestar:
    """The data-port app; serves the admin routes too unless ``server.admin_port`` is set."""
    runtime = runtime or Runtime.build(config, transport=transport, local_factory=local_factory)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.close()

    handlers: list[Any] = list(routes)
    if config.server.admin_port is None:
        handlers += admin_routes
    return _litestar(handlers, runtime, config, lifespan=[lifespan])


def create_admin_app(runtime: Runtime) -> Litestar:
    """The admin-port app (shares the runtime; its lifespan belongs to the data app)."""
    return _litestar(list(admin_routes), runtime, runtime.config, lifespan=[])


def _litestar(
    handlers: list[Any], runtime: Runtime, config: Config, lifespan: list[Any]
) -> Litestar:
    return Litestar(
        route_handlers=handlers,
        state=State({"runtime": runtime}),
        lifespan=lifespan,
        request_max_body_size=config.server.max_body_bytes,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        middleware=[closing],
        before_send=[_identify, _count],
        openapi_config=None,
        logging_config=None,
    )


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    rid = request_id(request.headers.get("x-request-id"))
    if status in (404, 405) and "route_handler" not in request.scope:
        _unrouted(request, status, rid)
    if status == 404:
        error = APIError(
            404, f"Unknown route: {request.method} {request.url.path}", code="not_found"
        )
    elif status == 405:
        error = APIError(405, f"Method {request.method} is not allowed on {request.url.path}.")
    elif status == 413:
        error = APIError(413, "The request body is too large.", code="request_too_large")
    else:
        error = APIError(status, str(exc.detail))
    response = error_response(error, wire=_wire(request))
    response.headers["x-request-id"] = rid  # (the id its log line has)
    allow = (exc.headers or {}).get("allow") if status == 405 else None
    if allow:  # (RFC 9110 asks a 405 to say which methods the route takes: it said none)
        response.headers["allow"] = allow
    return response


def _unrouted(request: Request[Any, Any, Any], status: int, rid: str) -> None:
    """Count and log a request no route took (an unknown path, a wrong method) as the API
    routes count and log their client errors: they were in neither /metrics nor the log.
    NOTE: under the route "unknown", never the path: a client could make up a new path, and
    so a new series, with each request."""
    runtime: Runtime = request.app.state.runtime
    runtime.metrics.requests.labels("unknown", "", "bypass", str(status)).inc()
    observe(runtime, Seen("unknown", rid, "", "", "", status, 0.0), None)


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    error = APIError(500, "The gateway had an internal error.", code="internal_error")
    return error_response(error, wire=_wire(request))  # (its x-request-id: see _identify)


def _identify(message: Message, scope: Scope) -> None:
    """An ``x-request-id`` on every answer (observability.md: "always, errors too"), the
    client's own when it sent a sane one: GET /v1/models, the token counts, the stored
    responses, /readyz and the admin routes wrote none. An answer that has one keeps it (the
    API routes write theirs; a fresh upstream answer carries the provider's)."""
    if message["type"] != "http.response.start":
        return
    headers = list(message.get("headers", ()))
    if any(name.lower() == b"x-request-id" for name, _ in headers):
        return
    sent = next((v for name, v in scope.get("headers", ()) if name == b"x-request-id"), b"")
    headers.append((b"x-request-id", request_id(sent.decode("latin-1")).encode()))
    message["headers"] = headers


def _count(message: Message, scope: Scope) -> None:
    """Count a routed request that ``serve`` does not count (the stored responses, token
    counts, models, health checks, /metrics, the admin routes): they were in no series.
    NOTE: under its route template ("/v1/responses/{response_id}"), never the path, which
    holds ids: one series per route, not per response."""
    if message["type"] != "http.response.start":
        return
    handler = scope.get("route_handler")
    if handler is None or handler.opt.get("counted"):
        return  # (no route took it: _unrouted counts it; or serve did)
    runtime: Runtime = scope["litestar_app"].state.runtime
    route = scope.get("path_template") or "unknown"
    runtime.metrics.requests.labels(route, "", "bypass", str(message["status"])).inc()


def _wire(request: Request[Any, Any, Any]) -> Wire:
    """Whose error body a request no route answered gets: Anthropic's under ``/v1/messages``
    and for the anthropic SDK (it sends ``anthropic-version``), whose clients read no other."""
    path = request.url.path
    messages = path == "/v1/messages" or path.startswith("/v1/messages/")
    return MESSAGES if messages or "anthropic-version" in request.headers else CHAT
