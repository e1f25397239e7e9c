"""Admin routes: /metrics (Prometheus), /admin/stats, /admin/history, /admin/cache/flush,
/admin/cache/tightening/reset, /admin/cache/entries[/{id}] and /dashboard
(docs/observability.md describes each)."""

from __future__ import annotations

import asyncio
import math
import time
from importlib import resources
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from semantic.cache import ResponseCache
from semantic.store import StoreUnavailable

from . import entries
from .auth import AdminAccess, bearer
from .errors import APIError
from .requests import check_namespace
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
    body = await _object(request, ("namespace",), ("prefix", "answers"))
    if isinstance(body, Response):
        return body
    for name in ("prefix", "answers"):
        if not isinstance(body.get(name, False), bool):
            return _error(APIError(400, f"'{name}' must be true or false.", param=name))
    # NOTE: each was a 200 that flushed nothing (an operator's typo looked like an empty cache)
    if body.get("answers") is False and not body.get("prefix"):
        message = "Nothing to flush: 'answers' is false and 'prefix' is not true."
        return _error(APIError(400, message, param="answers"))
    # "" is the default namespace (requests without one); only a missing or null one means all.
    namespace = body.get("namespace")
    try:
        if namespace is not None:  # (a name no request can use holds nothing)
            check_namespace(namespace, "namespace")  # (a string: ``_object``)
    except APIError as exc:
        return _error(exc)
    flushed = abandoned = 0
    if body.get("answers", True) and runtime.cache is not None:
        # (answers already sent are stored, then dropped; a write still stuck after the
        # bound is cancelled, so that it cannot land after the flush)
        abandoned = await runtime.pipeline.drain("before a flush")
        try:
            flushed = await runtime.cache.flush(namespace)
        except StoreUnavailable as exc:
            return _error(APIError(503, str(exc), code="cache_unavailable"))
    prefix_bytes = 0
    if body.get("prefix"):
        for backend in runtime.backends.values():
            # (off the loop: it may wait for a disk write)
            prefix_bytes += await asyncio.to_thread(backend.flush_prefix_cache)
    reply = {"flushed": flushed, "namespace": namespace, "prefix_bytes_freed": prefix_bytes,
             "abandoned_writes": abandoned}  # fmt: skip
    return Response(_encode(reply), media_type="application/json")


@post("/admin/cache/tightening/reset", status_code=200)
async def reset_tightening(request: Request[Any, Any, Any]) -> Response[Any]:
    """Undo auto-tighten (``cache.semantic.auto_tighten``): every scope's verifier threshold back
    to the configured one, or only those of ``{"tenant": ..., "model": ..., "namespace": ...}``
    (any of them; ``tenant`` as ``/admin/stats`` shows it in ``cache.audit.estimates``)."""
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    body = await _object(request, ("tenant", "model", "namespace"))
    if isinstance(body, Response):
        return body
    auditor = runtime.auditor
    if auditor is None or auditor.tightening is None:
        return _error(APIError(400, "Auto-tighten is off (cache.semantic.auto_tighten)."))
    reset = auditor.tightening.reset(body.get("tenant"), body.get("model"), body.get("namespace"))
    return Response(_encode({"reset": reset}), media_type="application/json")


@get("/dashboard")
async def dashboard(request: Request[Any, Any, Any]) -> Response[Any]:
    runtime = _authorized(request, allow_query=True)
    if isinstance(runtime, Response):
        return runtime
    page = resources.files("gateway").joinpath("dashboard.html").read_text(encoding="utf-8")
    return Response(page, media_type="text/html")


@get("/admin/history")
async def history(request: Request[Any, Any, Any]) -> Response[Any]:
    """The dashboard's data: the history ring (``?since=`` unix time: newer points only), the
    recent semantic verdicts and the usage ledger."""
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    try:
        since = float(request.query_params.get("since") or 0) or None
    except ValueError:
        since = math.nan
    if since is not None and not math.isfinite(since):  # (NaN and inf: no point, ever)
        return _error(APIError(400, "'since' must be a unix time in seconds.", param="since"))
    body = {
        "replica": runtime.replica,  # (behind a load balancer, each read may reach another)
        "started": runtime.started,
        "now": time.time(),  # (its clock as it answers: the dashboard compares "started" to it)
        **runtime.history.snapshot(since),
        "show_text": runtime.config.admin.show_text,
        "ledger": runtime.ledger.stats(),
        "priced": sorted(runtime.config.prices),  # (the others' money is unknown: not $0)
    }
    return Response(_encode(body), media_type="application/json")


@get("/admin/cache/entries")
async def list_entries(request: Request[Any, Any, Any]) -> Response[Any]:
    """Cached answers, newest first: ``?limit=&offset=`` and filters ``namespace``, ``model``,
    ``tenant``, ``kind`` (exact|semantic) and ``q`` (text search, with ``admin.show_text``)."""
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    try:
        query = entries.parse_query(request.query_params, runtime.config.admin.show_text)
        cache = _cache(runtime)
        page = await entries.list_entries(cache, query, runtime.texts)
    except APIError as exc:
        return _error(exc)
    except StoreUnavailable as exc:
        return _error(APIError(503, str(exc), code="cache_unavailable"))
    return Response(_encode(page), media_type="application/json")


@get("/admin/cache/entries/{entry_id:str}")
async def show_entry(request: Request[Any, Any, Any], entry_id: FromPath[str]) -> Response[Any]:
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    try:
        entry = await _cache(runtime).entry(entries.parse_id(entry_id))
        if entry is None:
            raise entries.not_found(entry_id)
    except APIError as exc:
        return _error(exc)
    except StoreUnavailable as exc:
        return _error(APIError(503, str(exc), code="cache_unavailable"))
    body = entries.render(entry, runtime.texts, full=True)
    return Response(_encode(body), media_type="application/json")


@delete("/admin/cache/entries/{entry_id:str}", status_code=200)
async def delete_entry(request: Request[Any, Any, Any], entry_id: FromPath[str]) -> Response[Any]:
    runtime = _authorized(request)
    if isinstance(runtime, Response):
        return runtime
    try:
        if not await _cache(runtime).delete(entries.parse_id(entry_id)):
            raise entries.not_found(entry_id)
    except APIError as exc:
        return _error(exc)
    except StoreUnavailable as exc:
        return _error(APIError(503, str(exc), code="cache_unavailable"))
    return Response(_encode({"id": entry_id, "deleted": True}), media_type="application/json")


admin_routes = [
    metrics, stats, flush, reset_tightening, dashboard, history, list_entries, show_entry,
    delete_entry,
]  # fmt: skip


async def _object(
    request: Request[Any, Any, Any], strings: tuple[str, ...], others: tuple[str, ...] = ()
) -> Any:
    """The request's JSON object (an empty body: ``{}``) whose ``strings`` fields, when given,
    are strings or null, and which has no field but those and ``others``; else the 400 response.

    NOTE: a misspelt field must not widen what it does ({"namspace": "x"} flushed every
    namespace; {"tennant": ...} reset every scope): an unknown field is refused.
    """
    raw = await request.body()
    try:
        body = msgspec.json.decode(raw) if raw.strip() else {}
    except msgspec.DecodeError:
        return _error(APIError(400, "The request body must be JSON."))
    if not isinstance(body, dict):
        return _error(APIError(400, "The request body must be a JSON object."))
    if unknown := sorted(set(body) - {*strings, *others}):
        fields = ", ".join((*strings, *others))
        return _error(APIError(400, f"Unknown field '{unknown[0]}': give {fields}.",
                               param=unknown[0]))  # fmt: skip
    for name in strings:
        if not isinstance(body.get(name, ""), str | None):
            return _error(APIError(400, f"'{name}' must be a string.", param=name))
    return body


def _authorized(
    request: Request[Any, Any, Any], allow_query: bool = False
) -> Runtime | Response[Any]:
    """The runtime when the request may use the admin routes, else the error response.

    NOTE: see gateway.auth for the policy: with tenants and no admin key, nobody gets in.
    """
    runtime: Runtime = request.app.state.runtime
    try:
        runtime.refuse_web_pages(request.headers, "The admin routes")  # (with or without a key)
    except APIError as exc:
        return _error(exc)
    token = bearer(request.headers.get("authorization"))
    if allow_query and not token:
        token = request.query_params.get("key", "")  # a browser opening /dashboard
    access = runtime.keys.admin_access(token)
    if access in (AdminAccess.OPEN, AdminAccess.GRANTED):
        return runtime
    if access is AdminAccess.CLOSED:
        return _error(
            APIError(
                403,
                "The admin routes are closed: this gateway has tenant keys (auth.keys) and no "
                "admin.api_key, and a tenant key never opens them. Set admin.api_key.",
                code="admin_closed",
            )
        )
    return _error(APIError(401, "A valid admin API key is required.", code="invalid_api_key"))


def _cache(runtime: Runtime) -> ResponseCache:
    if runtime.cache is None:
        raise APIError(400, "The response cache is off: cache.enabled is false, or this is a "
                       "cachegate worker (it has none).", code="cache_off")  # fmt: skip
    return runtime.cache


def _error(exc: APIError) -> Response[Any]:
    return Response(exc.json(), status_code=exc.status, media_type="application/json")
