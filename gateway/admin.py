"""Admin routes: /metrics (Prometheus), /admin/stats, /admin/cache/flush, /dashboard."""

from __future__ import annotations

import asyncio
import hmac
from importlib import resources
from typing import Any

import msgspec
from litestar import Request, Response, get, post

from semantic.store import StoreUnavailable

from .errors import APIError
from .runtime import Runtime

__all__ = ["admin_routes"]

_encode = msgspec.json.encode


@get("/metrics")
async def metrics(request: Request[Any, Any, Any]) -> Response[Any]:
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    return Response(runtime.metrics.render(), media_type="text/plain; version=0.0.4")


@get("/admin/stats")
async def stats(request: Request[Any, Any, Any]) -> Response[Any]:
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    return Response(_encode(runtime.stats()), media_type="application/json")


@post("/admin/cache/flush", status_code=200)
async def flush(request: Request[Any, Any, Any]) -> Response[Any]:
    """Drop cached answers: all of them, or one namespace with ``{"namespace": "..."}``
    (``""``: the default namespace of requests that name none).

    ``{"prefix": true}`` also drops the local models' prefix KV caches; with
    ``"answers": false`` only those (the cached answers stay).
    """
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    raw = await request.body()
    try:
        body = msgspec.json.decode(raw) if raw.strip() else {}
    except msgspec.DecodeError:
        return _error(APIError(400, "The request body must be JSON."))
    if not isinstance(body, dict) or not isinstance(body.get("namespace", ""), str | None):
        return _error(APIError(400, "'namespace' must be a string.", param="namespace"))
    for name in ("prefix", "answers"):
        if not isinstance(body.get(name, False), bool):
            return _error(APIError(400, f"'{name}' must be true or false.", param=name))
    # "" is the default namespace (requests without one); only a missing or null one means all.
    namespace = body.get("namespace")
    flushed = 0
    if body.get("answers", True) and runtime.cache is not None:
        try:
            flushed = await runtime.cache.flush(namespace)
        except StoreUnavailable as exc:
            return _error(APIError(503, str(exc), code="cache_unavailable"))
    prefix_bytes = 0
    if body.get("prefix"):
        for backend in runtime.backends.values():
            # (off the loop: it may wait for a disk write)
            prefix_bytes += await asyncio.to_thread(backend.flush_prefix_cache)
    return Response(
        _encode({"flushed": flushed, "namespace": namespace, "prefix_bytes_freed": prefix_bytes}),
        media_type="application/json",
    )


@get("/dashboard")
async def dashboard(request: Request[Any, Any, Any]) -> Response[Any]:
    runtime = _authorized(request, allow_query=True)
    if isinstance(runtime, Response):
        return runtime
    page = resources.files("gateway").joinpath("dashboard.html").read_text(encoding="utf-8")
    return Response(page, media_type="text/html")


admin_routes = [metrics, stats, flush, dashboard]


def _authorized(
    request: Request[Any, Any, Any], allow_query: bool = False
) -> Runtime | Response[Any]:
    runtime: Runtime = request.app.state.runtime
    expected = runtime.config.admin.api_key
    if not expected:
        if not runtime.config.auth.keys:
            return runtime
        # NOTE: with gateway keys but no admin key, any valid gateway key opens the admin
        # routes: never leave them open on a gateway that otherwise requires keys.
        header = request.headers.get("authorization")
        if allow_query and not header and request.query_params.get("key"):
            header = f"Bearer {request.query_params['key']}"  # a browser opening /dashboard
        try:
            runtime.authenticate(header)
        except APIError as exc:
            return _error(exc)
        return runtime
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else ""
    if allow_query and not token:
        token = request.query_params.get("key", "")
    if hmac.compare_digest(token.encode(), expected.encode()):
        return runtime
    return _error(APIError(401, "A valid admin API key is required.", code="invalid_api_key"))


def _error(exc: APIError) -> Response[Any]:
    return Response(exc.json(), status_code=exc.status, media_type="application/json")
