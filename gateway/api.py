"""HTTP routes of the data port: the OpenAI-compatible API and health checks.

Each API route is an adapter (its wire format ↔ the canonical request and answer) handed to
one serving function, ``serve``: authenticate, read the body, parse it, walk the tiers (the
pipeline, or the embeddings walk), and send the reply as JSON or as an SSE stream.
Disconnects and shutdown are handled in connections.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import msgspec
from litestar import HttpMethod, Request, Response, delete, get, post, route
from litestar.background_tasks import BackgroundTask
from litestar.exceptions import HTTPException, InternalServerException
from litestar.params import FromPath
from litestar.response import Stream

from .backend import Answer, Backend
from .canonical import Adapter, GatewayRequest, Reply, Wire
from .chat import CHAT, COMPLETION
from .connections import ClientDisconnected, StreamWatch, hold
from .embeddings import EMBEDDINGS, embed
from .errors import UPLOAD_ENDED, APIError, shutting_down
from .messages import client_credential, parse_count_tokens
from .messages_bridge import MESSAGES, count_tokens
from .observe import Seen, observe, request_id
from .pipeline import Pipeline, Watch
from .requests import gateway_request, request_tenant
from .responses import count_input_tokens, input_items_page, replay_events
from .runtime import Runtime
from .stored import StoredResponse
from .tracing import RequestTrace

__all__ = ["Walk", "error_response", "routes", "serve"]

log = logging.getLogger(__name__)

_encode = msgspec.json.encode
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
#: How a stream ends when its client went away (gateway.connections), not a failure.
_CLIENT_GONE = frozenset({"client_disconnected", "client_stuck"})

#: The routes ``serve`` counts in /metrics itself (with their model and cache outcome); the app
#: counts every other routed request by its route template (gateway.app).
_COUNTED = {"counted": True}

#: A tier walk: the pipeline's for an adapter (``through``), or one of its own (embeddings).
Walk = Callable[[Pipeline, GatewayRequest, str | None, Watch[Any]], Awaitable[Reply]]


def through(adapter: Adapter) -> Walk:
    """The pipeline's tier walk for the requests of ``adapter`` (mypy checks it is one)."""

    async def walk(
        pipeline: Pipeline, request: GatewayRequest, auth: str | None, watch: Watch[Any]
    ) -> Reply:
        return await pipeline.handle(request, adapter, auth=auth, watch=watch)

    return walk


@post("/v1/chat/completions", status_code=200, opt=_COUNTED)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await serve(request, CHAT, "/v1/chat/completions", through(CHAT))


@post("/v1/completions", status_code=200, opt=_COUNTED)
async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await serve(request, COMPLETION, "/v1/completions", through(COMPLETION))


@post("/v1/embeddings", status_code=200, opt=_COUNTED)
async def embeddings(request: Request[Any, Any, Any]) -> Response[Any]:
    return await serve(request, EMBEDDINGS, "/v1/embeddings", embed)


@post("/v1/responses", status_code=200, opt=_COUNTED)
async def create_response(request: Request[Any, Any, Any]) -> Response[Any]:
    responses = _runtime(request).responses
    return await serve(request, responses, "/v1/responses", through(responses))


@get("/v1/responses/{response_id:str}")
async def get_response(
    request: Request[Any, Any, Any], response_id: FromPath[str]
) -> Response[Any]:
    if request.query_params.get("stream") == "true":
        return _replay_stored(request, response_id)
    return _on_stored(request, response_id, lambda stored: stored.response)


@get("/v1/responses/{response_id:str}/input_items")
async def list_input_items(
    request: Request[Any, Any, Any], response_id: FromPath[str]
) -> Response[Any]:
    query = request.query_params
    return _on_stored(request, response_id, lambda s: input_items_page(s.input_items, query))


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(
    request: Request[Any, Any, Any], response_id: FromPath[str]
) -> Response[Any]:
    """Forget a stored response here, and at the upstream that made it (which stores it as
    well): an upstream that fails to delete it leaves both copies (the client may retry)."""
    runtime = _runtime(request)
    auth = request.headers.get("authorization")
    try:
        stored = _stored_response(request, response_id)
        backend = runtime.backends.get(stored.model)
        remote = getattr(backend, "delete_response", None)
        if stored.upstream and remote is not None:
            # NOTE: asked as the request that made it was (tenant, partition, account headers,
            # and routed: a forwarded client key is its tenant), or a cachegate upstream (a
            # worker) finds it filed under another partition and keeps its copy
            asked = gateway_request("responses", {"model": stored.model}, request.headers,
                                    runtime.authenticate(auth, request.headers))  # fmt: skip
            _, asked = runtime.pipeline.route(asked, auth)
            await remote(asked, stored.id, auth)
    except APIError as exc:
        return error_response(exc)
    runtime.responses.store.delete(stored.owner, stored.id)
    return _json({"id": stored.id, "object": "response", "deleted": True})


@post("/v1/responses/{response_id:str}/cancel", status_code=200)
async def cancel_response(
    request: Request[Any, Any, Any], response_id: FromPath[str]
) -> Response[Any]:
    """OpenAI cancels only a ``background: true`` response: any other is a 400. This gateway
    keeps none still running (the upstream that runs it is polled and cancelled instead), so
    a background one kept here has finished: answered as it is, as OpenAI answers a finished
    one. An id the caller does not own, or not kept here, is a 404 as for ``GET``."""
    return _on_stored(request, response_id, _cancelled)


def _cancelled(stored: StoredResponse) -> dict[str, Any]:
    if stored.response.get("background") is not True:
        raise APIError(400, "Cannot cancel a synchronous response.")
    return stored.response


@post("/v1/responses/input_tokens", status_code=200)
async def count_response_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    """The input tokens of a Response request (never cached, no model call)."""
    responses = _runtime(request).responses
    count = functools.partial(count_input_tokens, responses)
    return await _token_count(request, responses, responses.parse_count, count,
                              object="response.input_tokens")  # fmt: skip


@post("/v1/messages", status_code=200, opt=_COUNTED)
async def create_message(request: Request[Any, Any, Any]) -> Response[Any]:
    """Anthropic Messages: Anthropic's error bodies, ``x-api-key`` or a bearer token."""
    messages = _runtime(request).messages
    return await serve(request, messages, "/v1/messages", through(messages))


@post("/v1/messages/count_tokens", status_code=200)
async def count_message_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    """The input tokens of a Messages request (never cached, no model call)."""
    return await _token_count(request, MESSAGES, parse_count_tokens, count_tokens)


async def _token_count(
    request: Request[Any, Any, Any],
    wire: Wire,
    parse: Callable[[bytes, Mapping[str, str], str], GatewayRequest],
    count: Callable[[Backend, GatewayRequest, str | None], Awaitable[Answer]],
    **shape: str,
) -> Response[Any]:
    """A token-count route: ``wire``'s credentials and error bodies, the body read by
    ``parse``, routed as a create is, counted by ``count``; answers ``{**shape, input_tokens}``
    with the headers of the count to relay (an upstream's, as a create's answer has them)."""
    runtime = _runtime(request)
    checked, auth = _credential(wire, request)
    try:
        tenant = runtime.authenticate(checked, request.headers)
        _unencoded(request)
        parsed = parse(await request.body(), request.headers, tenant)
        backend, parsed = runtime.pipeline.route(parsed, auth)
        counted = await count(backend, parsed, auth)
    except APIError as exc:
        return error_response(exc, wire=wire)
    except HTTPException as exc:
        return error_response(_from_http(exc), wire=wire)
    # (a provider's own x-request-id, relayed, keeps its place: the gateway's id beside it)
    answer = _json({**shape, **counted.body}, headers=counted.headers)
    return _identified(answer, request_id(request.headers.get("x-request-id")))


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[Any]:
    """The configured models: OpenAI's list, or Anthropic's for its SDK (which sends
    ``anthropic-version``, its key as ``x-api-key`` or a bearer token)."""
    runtime, anthropic = _runtime(request), _anthropic(request)
    try:
        runtime.authenticate(
            _credential(MESSAGES if anthropic else CHAT, request)[0], request.headers
        )
    except APIError as exc:
        return error_response(exc, wire=MESSAGES if anthropic else CHAT)
    # (at once: an upstream model may ask its upstream for its context window, ≤ 2 s)
    data = list(await asyncio.gather(*(b.describe() for b in runtime.backends.values())))
    if not anthropic:
        return _json({"object": "list", "data": data})
    try:
        models, more = _anthropic_page([_anthropic_model(d) for d in data], request.query_params)
    except APIError as exc:
        return error_response(exc, wire=MESSAGES)
    first, last = (models[0]["id"], models[-1]["id"]) if models else (None, None)
    return _json({"data": models, "has_more": more, "first_id": first, "last_id": last})


def _anthropic_page(
    models: list[dict[str, Any]], params: Mapping[str, str]
) -> tuple[list[dict[str, Any]], bool]:
    """One page of Anthropic's model list (``limit``: 1-1000, default 20; ``after_id`` /
    ``before_id``: the models after / before that one), and whether more follow it in its
    direction. NOTE: all were given whatever was asked (the SDK's ``limit=1`` got every one)."""
    raw = params.get("limit", "20")
    if not (re.fullmatch(r"[0-9]{1,4}", raw) and 1 <= int(raw) <= 1000):  # (not isdigit: "²")
        raise APIError(400, f"limit: Input should be an integer from 1 to 1000, got {raw!r}",
                       param="limit")  # fmt: skip
    if "after_id" in params and "before_id" in params:
        raise APIError(400, "Give after_id or before_id, not both.", param="before_id")
    limit, ids = int(raw), [m["id"] for m in models]
    for name in ("after_id", "before_id"):
        if (cursor := params.get(name)) is not None and cursor not in ids:
            raise APIError(400, f"{name}: no model `{cursor}` in the list", param=name)
    if (before := params.get("before_id")) is not None:
        end = ids.index(before)
        return models[max(end - limit, 0) : end], end > limit
    after = params.get("after_id")
    start = ids.index(after) + 1 if after is not None else 0
    return models[start : start + limit], start + limit < len(models)


@get("/v1/models/{model_id:path}")
async def get_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    runtime, anthropic = _runtime(request), _anthropic(request)
    wire = MESSAGES if anthropic else CHAT
    try:
        runtime.authenticate(_credential(wire, request)[0], request.headers)
        backend = runtime.backends.get(model_id.lstrip("/"))
        if backend is None:
            raise APIError(404, f"The model `{model_id.lstrip('/')}` does not exist.",
                           code="model_not_found")  # fmt: skip
        if (stalled := backend.stalled) is not None:  # (a gateway in front asks: see answers)
            raise APIError(503, f"The model `{backend.name}` is stalled: {stalled}.",
                           code="engine_stalled")  # fmt: skip
    except APIError as exc:
        return error_response(exc, wire=wire)
    described = await backend.describe()
    return _json(_anthropic_model(described) if anthropic else described)


def _anthropic(request: Request[Any, Any, Any]) -> bool:
    """Whether the anthropic SDK asks (it sends ``anthropic-version`` with every request)."""
    return "anthropic-version" in request.headers


def _anthropic_model(described: dict[str, Any]) -> dict[str, Any]:
    """A model as Anthropic's ``GET /v1/models`` describes one."""
    created = datetime.datetime.fromtimestamp(described.get("created") or 0, datetime.UTC)
    return {"type": "model", "id": described["id"], "display_name": described["id"],
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ")}  # fmt: skip


# NOTE: HEAD too: uptime monitors and load balancers often probe with it (it was a 405,
# counted and logged as a client error); the server sends the headers without the body.
@route("/healthz", http_method=[HttpMethod.GET, HttpMethod.HEAD])
async def healthz() -> Response[Any]:
    return _json({"status": "ok"})


@route("/readyz", http_method=[HttpMethod.GET, HttpMethod.HEAD])
async def readyz(request: Request[Any, Any, Any]) -> Response[Any]:
    runtime = _runtime(request)
    state = await runtime.readiness()
    # "failed": a model could not load and will not be retried (restart to try again);
    # "stalled": a loaded model's engine is stuck in one step (until it ends)
    status = "ready" if state["ready"] else "failed" if state.get("failed") else "loading"
    if status == "loading" and state.get("stalled"):
        status = "stalled"
    code = 200 if state["ready"] else 503
    # NOTE: probes name any host, and read only the status; a page whose name was pointed at
    # this address (DNS rebinding) reads the body too: the model names, a failed load's error
    # (its path). A Host not in server.allowed_hosts gets the status alone (not logged: probes).
    if not runtime.hosts.allows(request.headers.get("host")):
        return _json({"status": status}, code)
    return _json({"status": status, **state}, code)


routes = [
    chat_completions,
    completions,
    embeddings,
    create_response,
    get_response,
    list_input_items,
    delete_response,
    cancel_response,
    count_response_tokens,
    create_message,
    count_message_tokens,
    list_models,
    get_model,
    healthz,
    readyz,
]


def error_response(exc: APIError, cache: str = "bypass", wire: Wire = CHAT) -> Response[Any]:
    return Response(
        wire.error_json(exc),
        status_code=exc.status,
        media_type="application/json",
        headers={"x-cache": cache, **exc.headers},
    )


async def serve(
    request: Request[Any, Any, Any], wire: Wire, route: str, walk: Walk
) -> Response[Any]:
    """Answer one API request: ``wire`` parses it and writes its errors, ``walk`` answers it."""
    runtime = _runtime(request)
    seen = _Seeing(route, request_id(request.headers.get("x-request-id")))
    try:
        parsed = await _parse(request, runtime, wire, seen)
        seen.known(runtime, parsed)
        trace = seen.trace.active() if seen.trace else contextlib.nullcontext()
        with runtime.connections.abortable(), trace:
            auth = _credential(wire, request)[1]
            if runtime.admission is not None and (door := runtime.admission.door()) is not None:
                await runtime.connections.guard(request)(door)  # the loop runs late: wait
            reply = await walk(runtime.pipeline, parsed, auth, runtime.connections.guard(request))
            hold(request.scope.setdefault("state", {}), reply.stream)  # (see ``closing``)
    except ClientDisconnected as gone:
        ran = gone.reply.cache if gone.reply is not None else "bypass"  # (as the access log says)
        _record(runtime, route, seen.model, ran, 499, seen.started)
        observe(runtime, seen.now(499), gone.reply)  # (a model call it ran: booked)
        return Response(b"", status_code=499)
    except Exception as exc:  # litestar's own: e.g. 413 for an oversized body; a failure
        error = _api_error(exc, route, seen.request_id)
        _record(runtime, route, seen.model, "bypass", error.status, seen.started)
        seen.upstream_status = getattr(exc, "upstream_status", None)
        observe(runtime, seen.now(error.status), None)
        return _identified(error_response(error, wire=wire), seen.request_id)
    return _send(runtime, reply, wire, seen)


# ---------------------------------------------------------------------------------------------
# helpers


class _Seeing:
    """What ``serve`` learns about a request as it goes, for ``observe`` (see gateway.observe)."""

    def __init__(self, route: str, rid: str) -> None:
        self.route, self.request_id = route, rid
        self.started = time.perf_counter()
        self.tenant = self.model = self.namespace = self.upstream_id = ""
        self.trace: RequestTrace | None = None
        self.upstream_status: int | None = None

    def known(self, runtime: Runtime, parsed: GatewayRequest) -> None:
        self.tenant, self.namespace = parsed.tenant, parsed.control.namespace
        self.model = parsed.model if parsed.model in runtime.backends else ""
        if runtime.tracing is not None:
            self.trace = runtime.tracing.start(
                parsed.kind, parsed.model, self.request_id, self.tenant, configured=bool(self.model)
            )

    def now(self, status: int, ttft: float | None = None) -> Seen:
        latency = time.perf_counter() - self.started
        return Seen(self.route, self.request_id, self.tenant, self.model, self.namespace, status,
                    latency, ttft, self.trace, self.upstream_id, self.upstream_status)  # fmt: skip


def _identified(response: Response[Any], rid: str) -> Response[Any]:
    """``x-request-id`` on an error; an upstream's own, relayed, keeps its place."""
    if "x-request-id" in response.headers:
        response.headers["x-cachegate-request-id"] = rid
    else:
        response.headers["x-request-id"] = rid
    return response


async def _parse(
    request: Request[Any, Any, Any], runtime: Runtime, wire: Wire, seen: _Seeing
) -> GatewayRequest:
    tenant = runtime.authenticate(_credential(wire, request)[0], request.headers)
    _unencoded(request)
    try:
        raw = await request.body()
    except InternalServerException as exc:  # litestar's: the client left mid-body (a 499)
        # (the shutdown's deadline ended it: gateway.corked; not one that left after it)
        if request.scope.get("state", {}).get(UPLOAD_ENDED):
            raise shutting_down() from exc
        raise ClientDisconnected from exc
    try:
        return wire.parse(raw, request.headers, tenant)
    except APIError:
        # (a malformed request for a configured model is that model's error in the metrics
        # and the log, as one its upstream refused is, not an unknown model's "")
        seen.model = _named_model(runtime, raw)
        raise


def _unencoded(request: Request[Any, Any, Any]) -> None:
    """A 415 for a body sent with a ``content-encoding`` (gzip): the gateway reads bodies as
    they are, and such a body was a 400 saying it was not valid JSON. NOTE: not decompressed,
    so that ``server.max_body_bytes`` bounds what a request makes the gateway hold."""
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise APIError(
            415,
            f"Content-Encoding '{coding[:40]}' is not supported: send the body uncompressed.",
            code="unsupported_content_encoding",
            headers={"accept-encoding": "identity"},  # (RFC 9110: the codings it accepts)
        )


class _Named(msgspec.Struct):
    model: str = ""


def _named_model(runtime: Runtime, raw: bytes) -> str:
    """The configured model a request body names, else ""."""
    try:
        model = msgspec.json.decode(raw, type=_Named).model
    except (msgspec.DecodeError, RecursionError):  # (a body nested past msgspec's depth)
        return ""
    return model if model in runtime.backends else ""


def _credential(wire: Wire, request: Request[Any, Any, Any]) -> tuple[str | None, str | None]:
    """(the Authorization the gateway checks, the credential a backend may forward): the
    Messages API's clients send their key as ``x-api-key`` too."""
    if wire.kind == "messages":
        return client_credential(request.headers)
    authorization = request.headers.get("authorization")
    return authorization, authorization


def _send(runtime: Runtime, reply: Reply, wire: Wire, seen: _Seeing) -> Response[Any]:
    metrics, route, model = runtime.metrics, seen.route, seen.model
    if reply.saved_tokens:
        metrics.saved_tokens.labels(model).inc(reply.saved_tokens)
    if reply.coalesced:
        metrics.coalesced.labels(model).inc()
    headers = _headers(reply, seen)
    if reply.stream is None:
        _record(runtime, route, model, reply.cache, 200, seen.started)
        observe(runtime, seen.now(200), reply)
        return Response(
            _encode(reply.body),
            media_type="application/json",
            headers=headers,
            background=_audit_after(runtime, reply),
        )
    metrics.requests.labels(route, model, reply.cache, "200").inc()
    ended: dict[str, Any] = {"ttft": None, "error": None}

    def on_first() -> None:
        ended["ttft"] = time.perf_counter() - seen.started
        metrics.latency.labels(route, reply.cache).observe(ended["ttft"])

    def on_error(code: str) -> None:
        ended["error"] = code
        metrics.stream_errors.labels(route, model, code).inc()

    def on_end() -> None:
        # (the log line's status: a client that left is 499, as before a response; another
        # end before [DONE] is the gateway's or the model's failure)
        error = ended["error"]
        status = 200 if error is None else 499 if error in _CLIENT_GONE else 502
        observe(runtime, seen.now(status, ended["ttft"]), reply)
        if reply.audit is not None and runtime.auditor is not None:
            runtime.auditor.submit(reply.audit)  # the replay has been sent

    watch = StreamWatch()
    events = runtime.connections.send(reply, watch, wire.error_event, on_first, on_error)
    watch.events = _then(events, on_end)
    return Stream(
        watch.events,
        media_type="text/event-stream",
        headers={**_SSE_HEADERS, **headers},
        background=BackgroundTask(_closed, watch),
    )


async def _closed(watch: StreamWatch) -> None:
    """Close a stream's events once its response has ended, however it ended.

    NOTE: litestar cancels its send loop when the client goes; when the loop sat in a write
    (the client's window full), nothing closed the event generator, so its model call and
    its booking waited for the watchdog (``stream_idle_timeout``). litestar runs a response's
    background task after every end of its body; closing an ended generator does nothing.
    """
    with contextlib.suppress(RuntimeError):  # (the watchdog is closing it right now)
        await watch.events.aclose()


def _audit_after(runtime: Runtime, reply: Reply) -> BackgroundTask | None:
    """Hands a sampled semantic hit to the auditor once its response has been sent (litestar
    runs a response's background task after the last byte)."""
    job, auditor = reply.audit, runtime.auditor
    if job is None or auditor is None:
        return None

    async def start() -> None:
        auditor.submit(job)  # (returns at once: the audit runs in a task of its own)

    return BackgroundTask(start)


def _headers(reply: Reply, seen: _Seeing) -> dict[str, str]:
    """The reply's headers with ``x-cache`` and ``x-request-id``.

    NOTE: a fresh upstream answer keeps the provider's x-request-id (what its support asks
    for, and what the SDKs expose as ``_request_id``); the gateway's own is then beside it.
    """
    headers = {"x-cache": reply.cache, "x-request-id": seen.request_id, **reply.headers}
    if headers["x-request-id"] != seen.request_id:
        seen.upstream_id = headers["x-request-id"]
        headers["x-cachegate-request-id"] = seen.request_id
    return headers


async def _then(events: AsyncIterator[bytes], done: Callable[[], None]) -> AsyncIterator[bytes]:
    """``events``, then ``done()`` once they have ended (or were closed)."""
    try:
        async for piece in events:
            yield piece
    finally:
        try:
            if isinstance(events, AsyncGenerator):  # (Connections.send is one: closes the stream)
                await events.aclose()
        finally:  # (a cancel again during that close: the request is still observed)
            done()


def _on_stored(
    request: Request[Any, Any, Any],
    response_id: str,
    answer: Callable[[StoredResponse], dict[str, Any]],
) -> Response[Any]:
    """``answer`` about the caller's own stored response, as JSON (or the error)."""
    try:
        return _json(answer(_stored_response(request, response_id)))
    except APIError as exc:
        return error_response(exc)


def _replay_stored(request: Request[Any, Any, Any], response_id: str) -> Response[Any]:
    """``GET /v1/responses/{id}?stream=true``: the stored response as the event stream that made
    it, from the event after ``starting_after`` (the SDKs' ``responses.stream(response_id=)``)."""
    try:
        stored = _stored_response(request, response_id)
        after = request.query_params.get("starting_after", "-1")
        # (a fullmatch, not isdigit: "--1" and "²" passed it and int() then raised, a 500)
        if not re.fullmatch(r"-?[0-9]+", after) or int(after) < -1:
            raise APIError(400, "'starting_after' must be an integer.", param="starting_after")
    except APIError as exc:
        return error_response(exc)
    # (one event per sequence number, from 0; a JSON data line never holds a blank line)
    events = b"".join(replay_events(stored.response)).split(b"\n\n")[int(after) + 1 : -1]
    return Stream((e + b"\n\n" for e in events), media_type="text/event-stream",
                  headers=_SSE_HEADERS)  # fmt: skip


def _caller(request: Request[Any, Any, Any]) -> str:
    """The tenant of a request to the stored responses' routes (401 without a valid key)."""
    runtime = _runtime(request)
    return request_tenant(
        runtime.authenticate(request.headers.get("authorization"), request.headers),
        request.headers,
    )


def _stored_response(request: Request[Any, Any, Any], response_id: str) -> StoredResponse:
    """The caller's own stored response; 404 for an unknown id and for another's alike."""
    responses = _runtime(request).responses
    stored = responses.store.get(responses.owner(_caller(request), request.headers), response_id)
    if stored is None:
        raise APIError(404, f"Response with id '{response_id}' not found.")
    return stored


def _record(
    runtime: Runtime, route: str, model: str, cache: str, status: int, started: float
) -> None:
    metrics = runtime.metrics
    metrics.requests.labels(route, model, cache, str(status)).inc()
    metrics.latency.labels(route, cache).observe(time.perf_counter() - started)


def _api_error(exc: Exception, route: str, rid: str) -> APIError:
    """The error a request that raised ``exc`` is answered with.

    NOTE: an unexpected failure (a bug, a cache read that raised) is a 500 here, not in the
    app's catch-all handler: there it was not counted in ``/metrics``, its trace span never
    ended and its answer had no ``x-request-id``.
    """
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, HTTPException):
        return _from_http(exc)
    log.error("unhandled error on %s (request %s)", route, rid, exc_info=exc)
    return APIError(500, "The gateway had an internal error.", code="internal_error")


def _from_http(exc: HTTPException) -> APIError:
    status = exc.status_code
    if status == 413:
        return APIError(413, "The request body is too large.", code="request_too_large")
    return APIError(status, str(exc.detail))


def _runtime(request: Request[Any, Any, Any]) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _json(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response[Any]:
    return Response(_encode(obj), status_code=status, media_type="application/json",
                    headers=dict(headers or {}))  # fmt: skip
