"""Forwarding to an OpenAI-compatible upstream (OpenAI, vLLM, SGLang, a cachegate worker).

One pooled ``httpx.AsyncClient`` per upstream. Retries (connect errors, 429, 5xx) happen only
before the first response byte, with exponential backoff and jitter, honouring ``Retry-After``.
Streams are passed through event by event as they arrive; closing a stream (the client went
away) closes the upstream connection, which cancels the upstream request.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import email.utils
import functools
import hashlib
import http.cookiejar
import logging
import math
import random
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
from httpx._utils import get_environment_proxies  # (httpx's own reading of them)

from .backend import OPENAI_SAMPLING, Answer, BackendStream, Meter, StreamEvent, relayed
from .config import ConfigError, OpenAIModelConfig, redact_url
from .errors import NO_RETRY, SHUTTING_DOWN_CODE, APIError, responses_error_event, sse_error
from .http11 import HANDLED, HTTP11Transport, StaleConnection
from .readahead import ReadAhead
from .requests import (
    HOPS_HEADER,
    IF_READY_HEADER,
    KEEPALIVE_HEADER,
    KEEPALIVE_MIN,
    PARTITION_HEADER,
    GatewayRequest,
    tenant_partition,
)
from .router import PrefixRouter, prompt_text
from .sse import KEEPALIVE, EventTooLarge, SSEParser

__all__ = [
    "OPENAI_APIS",
    "ReplicatedBackend",
    "UpstreamBackend",
    "UpstreamError",
    "UpstreamStream",
    "prompt_cache_key",
    "read_object",
]

#: What an OpenAI-compatible upstream is sent as is (its own path for each).
OPENAI_APIS = frozenset({"chat", "completion", "embedding", "responses"})

log = logging.getLogger(__name__)
_httpx_log = logging.getLogger("httpx")


class _RedactURL(logging.Filter):
    """httpx's request lines (``server.log_level: debug``) name each upstream URL: a
    credential its ``base_url`` holds (``https://user:pw@host``, ``?key=``) is shown as
    ``***``, as ``cachegate config show`` shows it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_url(str(a)) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


_httpx_log.addFilter(_RedactURL())
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class UpstreamBackend:
    """A configured model served by an OpenAI-compatible HTTP API."""

    def __init__(
        self,
        name: str,
        config: OpenAIModelConfig,
        *,
        forward_client_auth: bool,
        one_tenant: bool,
        base_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_retry: Any = None,
        judges_timeouts: bool = True,
    ) -> None:
        self.name = name
        self.config = config
        #: A timed-out answer is judged here (``_slow_not_hung``); a replica's is judged by
        #: its ``ReplicatedBackend`` (``_down``), which may send the request elsewhere.
        self._judges_timeouts = judges_timeouts
        self._forward_client_auth = forward_client_auth
        self.forwards_client_auth = forward_client_auth and not config.api_key
        #: The upstream's rate-limit headers reach the client (see ``backend.relayed``): the
        #: key they describe is the client's own, or only one tenant's requests use it.
        self.relays_rate_limits = one_tenant or self.forwards_client_auth
        self.apis = OPENAI_APIS
        #: (the model name is in every key already; the upstream model it stands for is not)
        self.cache_salt = _salt(config)
        self._on_retry = on_retry
        base = httpx.URL(base_url or config.urls[0])
        #: A base URL's query (``?api-version=...``, a signed ``?sig=``) goes on every request:
        #: httpx would put the request's path after it, and every request missed its route.
        self._query = base.query
        self._client = _client(config, base, transport)
        self._urls: dict[str, httpx.URL] = {}
        self._timeouts = self._client.timeout.as_dict()
        #: The upstream's ``context_window``, when last asked, how many answers gave none
        self._window: int | None = None  # (see ``_context_window``)
        self._window_asked = -math.inf
        self._window_answers = 0
        self._probe: asyncio.Future[bool] | None = None  # (the liveness check under way)

    # -- Backend ---------------------------------------------------------------------------

    def check(self, request: GatewayRequest) -> None:
        pass  # (the upstream judges what it can read)

    def as_sent(self, request: GatewayRequest) -> GatewayRequest:
        return request

    async def delete_response(
        self, request: GatewayRequest, response_id: str, auth: str | None = None
    ) -> bool:
        """``DELETE /responses/{id}`` at the upstream (a Response it made stores it there);
        False when it holds no such id, an ``UpstreamError`` when it failed.

        NOTE: an upstream that cannot say (unreachable, 502-504, timed out) keeps its copy, so
        nothing is deleted: a retryable 503, as with replicas, rather than its 502, which told
        the SDKs not to retry (``x-should-retry: false``) a delete never retried here.
        """
        try:
            return await self._delete_response(request, response_id, auth)
        except UpstreamError as exc:
            if not exc.replica_unhealthy:
                raise
            down_for = self.config.routing.down_for
            raise _holder_unavailable(self.name, response_id, down_for) from None

    async def _delete_response(
        self, request: GatewayRequest, response_id: str, auth: str | None
    ) -> bool:
        """``delete_response`` with the upstream's own failure (a replica's: see
        ``ReplicatedBackend.delete_response``)."""
        headers = _ascii(self._headers(request, auth))
        try:
            response = await self._client.delete(
                self._url(f"responses/{response_id}"), headers=headers
            )
        except httpx.TimeoutException:
            raise _timeout(self.name) from None
        except httpx.RequestError as exc:
            raise _unreachable(self.name, exc, final=True) from None
        if response.status_code in (404, 405, 501):  # (405, 501: it keeps no copy to delete)
            return False
        if not 200 <= response.status_code < 300:
            raise await _upstream_error(
                self.name, response, self.relays_rate_limits, retryable=False,
                secret=self._sent_key(auth),
            )  # fmt: skip
        return True

    async def count_input_tokens(self, request: GatewayRequest, auth: str | None = None) -> Answer:
        """``POST /responses/input_tokens`` upstream: the Response request's input tokens, with
        the upstream's headers to relay (its ``x-request-id``, its rate-limit state), as a
        create's."""
        return await self._answer(request, auth, _COUNT_PATH)

    async def complete(
        self, request: GatewayRequest, auth: str | None = None, meter: Meter | None = None
    ) -> Answer:
        # (no ``meter``: an upstream's usage is only in its answer, as a stream's in its events)
        answer = await self._answer(request, auth)
        body = answer.body
        # an error sent with status 200 (a Response object always has "error", null or the
        # reason it failed: that is an answer, passed on; other servers may send a null one)
        failed = body.get("error") is not None and "choices" not in body
        if failed and body.get("object") != "response":
            error = body["error"]
            detail = error.get("message") if isinstance(error, dict) else error
            raise _failure(
                502, "upstream_error", f"Upstream for model '{self.name}' failed: {detail}"
            )
        member = _ANSWERS.get(request.kind)  # (a Response object: passed on as it came)
        if member and not isinstance(body.get(member), list) and body.get("object") != "response":
            raise _no_answer(self.name, body, member)
        if member == "choices" and (unread := _unreadable(request.kind, body["choices"])):
            raise _failure(502, "upstream_error", f"Upstream for model '{self.name}' {unread}.")
        previous = _echoed_previous(request)
        if previous is not None and body.get("object") == "response":
            body["previous_response_id"] = previous
        return answer

    async def open_stream(self, request: GatewayRequest, auth: str | None = None) -> UpstreamStream:
        response = await self._send(request, stream=True, auth=auth)
        stream = UpstreamStream(self.name, response, request.kind, self.relays_rate_limits,
                                previous=_echoed_previous(request),
                                secret=self._sent_key(auth), choices=request.body.get("n"),
                                stalls=_silence_tells_stalls(self.config.timeout.read))  # fmt: skip
        await stream.opened()
        return stream

    async def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "id": self.name,
            "object": "model",
            "created": 0,
            "owned_by": "upstream",
        }
        window = await self._context_window()
        if window is not None:
            described["context_window"] = window
        return described

    async def start(self) -> None:
        pass

    async def ready(self) -> bool:
        return True

    @property
    def _own_auth(self) -> dict[str, str]:
        """The model's ``api_key`` as a header, for what the gateway asks on its own behalf
        (``GET /models``: a model's description, a health check), never a client's key."""
        return {"authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    async def answers(self) -> bool:
        """Whether the upstream answers ``GET /models/{model}`` (with any status but 503)
        within ``timeout.connect`` (or ``read``, if shorter): one whose request timed out but
        that answers this is slow (a generation longer than ``timeout.read``), not hung.

        NOTE: asked past ``max_connections`` (``_UNGATED``): a slow replica's connections are
        all in use, and the one its timed-out request freed goes to a request waiting for one;
        this waited behind it for ``timeout.pool``, in vain, and the replica was taken for hung.
        A 503 is no answer: a cachegate worker whose engine is stuck in one step (hung, its
        process alive) says so there (``engine_stalled``); it answered ``GET /models``, and
        was never skipped, each request sent there waiting ``timeout.read`` for a 504.
        One check at a time: requests that time out together (as many as ``max_connections``)
        share it; each asked its own, past that gate, as many new connections at once (through
        a proxy, whose pool has no cap of its own: as many tunnels).
        """
        probe = self._probe
        if probe is None or probe.done() or probe.get_loop() is not asyncio.get_running_loop():
            probe = self._probe = asyncio.ensure_future(self._answers())
        return await asyncio.shield(probe)

    async def _answers(self) -> bool:
        """``answers``, asked now."""
        t = self.config.timeout
        try:
            response = await self._described(min(t.connect, t.read))
        except httpx.HTTPError:
            return False
        return response.status_code != 503

    async def _described(self, timeout: float) -> httpx.Response:
        """The upstream's ``GET /models/{model}``, asked on the gateway's own behalf (its key:
        ``_own_auth``) and past ``max_connections`` (``_UNGATED``): the model's description
        (``_context_window``), a liveness check (``answers``)."""
        model = self.config.upstream_model or self.name
        return await self._client.get(
            self._url(f"models/{model}"), headers=self._own_auth, timeout=timeout,
            extensions={_UNGATED: True},
        )  # fmt: skip

    @property
    def failure(self) -> str | None:
        return None

    @property
    def stalled(self) -> str | None:
        return None

    def stats(self) -> dict[str, Any] | None:
        return None

    def flush_prefix_cache(self) -> int:
        return 0  # the upstream's own prompt cache is not ours to flush

    def hidden(self, answer: dict[str, Any], auth: str | None) -> dict[str, Any]:
        forms = _quoted(self._sent_key(auth))
        if not forms:
            return answer
        raw = _encode(answer)
        masked = _hidden(raw, forms)
        return answer if masked == raw else _decode(masked)

    def sampling_defaults(self) -> dict[str, float]:
        return dict(OPENAI_SAMPLING)

    async def close(self) -> None:
        await self._client.aclose()

    # -- helpers ---------------------------------------------------------------------------

    async def _answer(
        self, request: GatewayRequest, auth: str | None, path: str | None = None
    ) -> Answer:
        """The upstream's JSON object for ``request`` (sent to ``path``, else its kind's), with
        the headers of it to relay (``backend.relayed``): a create's, a count's."""
        try:
            response = await self._send(request, stream=False, auth=auth, path=path)
            body = await read_object(self.name, response, self._sent_key(auth))
        except UpstreamError as exc:
            if self._judges_timeouts and exc.code == "upstream_timeout":
                await self._slow_not_hung(exc)
            raise
        return Answer(body, relayed(response.headers, rate_limits=self.relays_rate_limits))

    async def _slow_not_hung(self, exc: UpstreamError) -> None:
        """A timed-out answer of an upstream that answers ``GET /models`` (``answers``) is a
        generation longer than ``timeout.read``, which may still run there: its 504 says
        ``x-should-retry: false`` (``final``), as a replica's does (``ReplicatedBackend._down``).
        NOTE: with one ``base_url`` it said nothing, and each of the OpenAI SDKs' two retries
        ran (and billed) the generation once more, the client waiting a read timeout for each."""
        if exc.upstream_code != _ENGINE_STALLED and await self.answers():
            exc.final()

    def _payload(self, request: GatewayRequest, stream: bool, path: str | None = None) -> bytes:
        body = dict(request.body)
        body["model"] = self.config.upstream_model or request.model
        if path == _COUNT_PATH:  # (a count takes a Response request's fields, nothing else)
            return _encode(body)
        if self.config.prompt_cache_key and request.kind in ("chat", "responses"):
            body.setdefault("prompt_cache_key", prompt_cache_key(request))
        if stream and request.kind in ("chat", "completion"):
            # NOTE: usage is always asked for, so an assembled stream can be cached with its
            # usage; the pipeline drops the usage chunk when the client did not ask for it.
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return _encode(body)

    def _gateway_headers(self, request: GatewayRequest) -> dict[str, str]:
        """What a cachegate behind this one reads, whatever the wire format: the hop count,
        this gateway's tenant as a partition (it keeps the tenants apart there), and the
        request's no-cache / no-store (an audit's call must reach a model, not that cache's
        copy of the hit)."""
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            HOPS_HEADER: str(request.hops + 1),
            # a worker's stream is heard from within timeout.read, even during a long prefill
            KEEPALIVE_HEADER: f"{self.config.timeout.read / _KEEPALIVE_SHARE:g}",
            PARTITION_HEADER: tenant_partition(request.tenant, self.config.api_key),
        }
        if request.if_ready:
            headers[IF_READY_HEADER] = "1"
        control = request.control
        directives = [d for d, on in (("no-cache", control.no_cache), ("no-store", control.no_store))
                      if on]  # fmt: skip
        if directives:
            headers["cache-control"] = ", ".join(directives)
        return headers

    def _headers(self, request: GatewayRequest, auth: str | None) -> dict[str, str]:
        headers = self._gateway_headers(request)
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        elif auth and self._forward_client_auth:
            headers["authorization"] = _bearer(auth)
            headers.update(request.account)  # the client's organization/project, with its key
        return headers

    def _sent_key(self, auth: str | None) -> str | None:
        """The key a request goes upstream with: the model's ``api_key``, else the client's own
        when it is forwarded (``auth``: its ``Authorization``, or ``"x-api-key <key>"``).

        NOTE: hidden in what the upstream sends back (``_hide``): a client's own key reached
        only that client, but a span's exception event (traces) and the log of a semantic
        audit's failed call kept it whole.
        """
        if self.config.api_key or not (auth and self._forward_client_auth):
            return self.config.api_key
        if auth.startswith("x-api-key "):
            return auth[len("x-api-key ") :]
        return auth.partition(" ")[2].strip() or auth

    async def _context_window(self) -> int | None:
        """The ``context_window`` the upstream's own ``GET /models/{id}`` gives (a cachegate
        worker's local model has one once loaded; OpenAI gives none), asked the first time it
        is wanted; until it gives one, refuses (4xx) or has answered ``_WINDOW_ASKS`` times
        without one, again at most every ``_WINDOW_RETRY_S``.

        NOTE: asked past ``max_connections`` (``_UNGATED``), as the liveness check is: with
        every connection in use (long answers), it waited ``timeout.pool`` for one, holding
        the client's ``/v1/models`` that long, and the model was listed without its window.
        """
        now = time.monotonic()
        settled = self._window is not None or self._window_answers >= _WINDOW_ASKS
        if settled or now - self._window_asked < _WINDOW_RETRY_S:
            return self._window
        self._window_asked = now
        try:  # NOTE: _window_asked is set first: a loop back to this gateway asks no further
            response = await self._described(2.0)
        except httpx.HTTPError as exc:
            log.debug("upstream %s: no model description: %r", self.name, exc)
            return None
        try:
            described = response.json() if response.status_code == 200 else None
        except ValueError:  # (a web app's HTML page: a 200 without one, counted as such)
            described = None
        window = described.get("context_window") if isinstance(described, dict) else None
        self._window = window if _is_count(window) else None
        # (a 200 without one: perhaps a worker still loading, or an upstream that never gives
        # one, as OpenAI: asked _WINDOW_ASKS times in all; a 4xx: it describes no model)
        if 400 <= response.status_code < 500:
            self._window_answers = _WINDOW_ASKS
        else:
            self._window_answers += response.status_code == 200
        return self._window

    async def _send(
        self, request: GatewayRequest, *, stream: bool, auth: str | None, path: str | None = None
    ) -> httpx.Response:
        payload = self._payload(request, stream, path)
        path = path or _PATHS[request.kind]
        headers = _ascii(self._headers(request, auth))
        if stream:
            headers["accept"] = "text/event-stream"
        attempts = self.config.max_retries + 1 if request.retries else 1
        attempt, resent = 0, False
        while True:
            last = attempt >= attempts - 1
            try:
                built = self._build(path, payload, headers)
                sent_at = time.monotonic()
                response = await self._post_built(built)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # Nothing reached the upstream yet, so a retry cannot run the request twice.
                if last:
                    raise _unreachable(self.name, exc, final=attempt > 0) from None
                await self._backoff(attempt, None, f"connect error: {exc!r}")
                attempt += 1
                continue
            except httpx.PoolTimeout:
                raise _busy(self.name, self.config.max_connections) from None
            except httpx.TimeoutException:
                raise _timeout(self.name) from None
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                # NOTE: a kept-alive connection the upstream closed as this request went out
                # (uvicorn closes idle ones after 5 s) fails at once, before any byte of an
                # answer: the request gets one more try on a fresh connection, outside
                # max_retries. Any other break may come after the upstream did the work, so
                # it is not sent again (``_stale``).
                sent_at = built.extensions.get(_ADMITTED, sent_at)  # (after any wait for a turn)
                late = time.monotonic() - sent_at > _STALE_CONNECTION_S
                if resent or late or not _stale(exc, built):
                    error = _broken(self.name, exc)
                    if resent:
                        error.final()
                    raise error from None
                resent = True
                self._resending(exc)
                continue
            except httpx.RequestError as exc:
                raise _broken(self.name, exc) from None
            if 200 <= response.status_code < 300:
                return response
            await self._refused(response, attempt, last, auth)  # raises unless to be retried
            attempt += 1

    def _resending(self, exc: Exception) -> None:
        """Log the one resend after a stale connection (``_send``), and count it as a retry
        (``cachegate_upstream_retries_total``: it was only logged)."""
        log.info("upstream %s: %r at once; sending again", self.name, exc)
        if self._on_retry is not None:
            self._on_retry(self.name, "stale connection")

    def _build(self, path: str, payload: bytes, headers: dict[str, str]) -> httpx.Request:
        """The request ``AsyncClient.build_request`` makes, from what is the same every time
        precomputed (the URL, the client's default headers, the timeouts); no cookies: the
        client's jar never keeps any (see ``__init__``)."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = self._url(path)
        merged = self._client.headers.copy()
        merged.update(headers)
        return httpx.Request(
            "POST", url, content=payload, headers=merged, extensions={"timeout": self._timeouts}
        )

    def _url(self, path: str) -> httpx.URL:
        """``path`` under the base URL, with the base URL's query."""
        url = self._client._merge_url(path)
        return url.copy_with(query=self._query) if self._query else url

    async def _post_built(self, request: httpx.Request) -> httpx.Response:
        """``AsyncClient.send(request, stream=True)`` without its layers that do nothing
        here (auth, event hooks, redirects: not followed, cookies: never kept).

        NOTE: measured, those layers and ``build_request`` cost ~0.2 ms a request
        (bench/overhead.py); the transport is the client's own (its proxy mounts included).
        """
        if self._client.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        transport = self._client._transport_for_url(request.url)
        response = await transport.handle_async_request(request)
        response.request = request
        if _httpx_log.isEnabledFor(logging.INFO):  # httpx's own line (shown at debug)
            _httpx_log.info('HTTP Request: %s %s "%s %d %s"', request.method, request.url,
                            response.http_version, response.status_code, response.reason_phrase)  # fmt: skip
        return response

    async def _refused(
        self, response: httpx.Response, attempt: int, last: bool, auth: str | None
    ) -> None:
        """An error status: back off when it is worth another try, else raise its error.

        NOTE: an upstream's ``x-should-retry: false`` is obeyed, as the OpenAI SDKs obey it,
        and said on to the client: a cachegate in front of another retried the 504 of a slow
        replica there (its generation still runs), which ran it once per retry.
        """
        told = response.headers.get("x-should-retry") == "false"
        # 508: the request came back to a gateway it had passed; another try loops again.
        retryable = response.status_code == 429 or response.status_code >= 500
        retryable = retryable and response.status_code != 508 and not told
        wait = _told_wait(response.headers)
        if retryable and not last and (wait is None or wait <= self.config.max_retry_wait):
            await response.aclose()
            await self._backoff(attempt, wait, f"HTTP {response.status_code}")
            return
        error = await _upstream_error(
            self.name, response, self.relays_rate_limits, retryable=retryable,
            secret=self._sent_key(auth),
        )  # fmt: skip
        if error.status in (401, 403) and self.config.api_key:
            raise _own_key_refused(self.name, error) from None
        if told or (retryable and last and attempt):  # (retried here already)
            error.final()
        raise error

    async def _backoff(self, attempt: int, retry_after: float | None, why: str) -> None:
        delay = retry_after
        if delay is None:
            base = self.config.retry_backoff * (2**attempt)
            delay = base * (0.5 + random.random() / 2)
        log.info("upstream %s: %s, retry %d in %.2fs", self.name, why, attempt + 1, delay)
        if self._on_retry is not None:
            self._on_retry(self.name, why)
        await asyncio.sleep(min(delay, self.config.max_retry_wait))


async def read_object(
    name: str, response: httpx.Response, secret: str | None = None
) -> dict[str, Any]:
    """Read and close a successful answer's body: a JSON object, or a 502/504 ``APIError``;
    ``secret`` in it is replaced by ``***`` (an error sent with status 200 may quote it: see
    ``_hide``)."""
    try:
        raw = await response.aread()
    except httpx.TimeoutException:
        raise _timeout(name) from None
    except httpx.RequestError as exc:  # also DecodingError: a body its encoding cannot undo
        raise _broken(name, exc) from None
    finally:
        await response.aclose()
    # (coded as the other answers that are no answers are: they said code null, api_error)
    try:
        body = _decode(_hide(raw, secret))
    except msgspec.DecodeError:
        raise _not_an_answer(f"Upstream for model '{name}' sent invalid JSON.") from None
    if not isinstance(body, dict):
        raise _not_an_answer(f"Upstream for model '{name}' sent an unexpected body.")
    return body


def _client(
    config: OpenAIModelConfig, base: httpx.URL, transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncClient:
    """The HTTP client of one upstream ``base`` URL (its query left off: see ``_query``)."""
    t = config.timeout
    return httpx.AsyncClient(
        base_url=str(base.copy_with(query=None)).rstrip("/") + "/",
        timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool),
        transport=_Admission(
            transport or HTTP11Transport(max_idle=config.max_connections),
            limit=config.max_connections,
            timeout=t.pool,
        ),
        mounts=None if transport else _proxy_mounts(config.max_connections, t.pool),
        # One client serves every tenant: a cookie an upstream sets for one request (a
        # load balancer's, a bot-check's) must not ride along on everyone else's.
        cookies=http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
    )


def _not_an_answer(message: str) -> APIError:
    return APIError(502, message, code="upstream_error", type="upstream_error")


class ReplicatedBackend:
    """One model served by several replicas, chosen per request by a ``PrefixRouter``.

    A replica that cannot be reached is avoided for ``routing.down_for`` seconds and the request
    goes to the next choice, so one dead worker costs a failed connect, not an error.
    """

    def __init__(self, name: str, config: OpenAIModelConfig, **client_options: Any) -> None:
        self.name = name
        self.config = config
        r = config.routing
        self.router = PrefixRouter(
            list(config.replicas),
            policy=r.policy,
            min_match=r.min_match,
            max_imbalance=r.max_imbalance,
            tree_bytes=r.tree_bytes,
        )
        self.forwards_client_auth = (
            bool(client_options.get("forward_client_auth")) and not config.api_key
        )
        self.apis = OPENAI_APIS
        self.cache_salt = _salt(config)
        self._on_retry = client_options.get("on_retry")
        #: How long ``_Primed`` holds a stream's comments for its first event (a keep-alive's time)
        self._hold = min(config.timeout.read / _KEEPALIVE_SHARE, _HOLD_MAX)
        single_attempt = msgspec.structs.replace(config, max_retries=0)
        self._replicas = [
            UpstreamBackend(
                name, single_attempt, base_url=url, judges_timeouts=False, **client_options
            )
            for url in config.replicas
        ]
        #: Response ids (``/v1/responses``) by the replica that made them, most recent last:
        #: a follow-up naming one as ``previous_response_id`` goes where it is stored.
        self._made: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._probes: set[asyncio.Task[None]] = set()  # (see _probe_soon)

    def check(self, request: GatewayRequest) -> None:
        pass  # (its replicas judge what they can read)

    def as_sent(self, request: GatewayRequest) -> GatewayRequest:
        return request

    async def complete(
        self, request: GatewayRequest, auth: str | None = None, meter: Meter | None = None
    ) -> Answer:
        answer: Answer = await self._routed(
            request, lambda b, r: b.complete(r, auth, meter), stream=False
        )
        return answer

    async def open_stream(self, request: GatewayRequest, auth: str | None = None) -> BackendStream:
        stream: BackendStream = await self._routed(
            request, lambda b, r: b.open_stream(r, auth), stream=True
        )
        return stream

    async def count_input_tokens(self, request: GatewayRequest, auth: str | None = None) -> Answer:
        answer: Answer = await self._routed(
            request, lambda b, r: b.count_input_tokens(r, auth), stream=False
        )
        return answer

    async def describe(self) -> dict[str, Any]:
        """The first replica's entry, with the ``context_window`` of the first that gives one."""
        described = await self._replicas[0].describe()
        for replica in self._replicas[1:]:
            if "context_window" in described:
                break
            if (window := (await replica.describe()).get("context_window")) is not None:
                described["context_window"] = window
        return described

    async def delete_response(
        self, request: GatewayRequest, response_id: str, auth: str | None = None
    ) -> bool:
        """At the replica that made it (or, not known here, at each until one holds it).

        NOTE: a replica that may hold it but cannot say (unreachable, 502-504, timed out: a
        killed worker) keeps its copy, so nothing is deleted: a retryable 503 rather than
        that replica's 502, which told the SDKs not to retry (``x-should-retry: false``).
        """
        made = self._made.get(response_id)
        order = sorted(range(len(self._replicas)), key=lambda i: i != made)
        unanswered = False
        for i in order:
            try:
                if await self._replicas[i]._delete_response(request, response_id, auth):
                    self._made.pop(response_id, None)
                    return True
            except UpstreamError as exc:
                if not exc.replica_unhealthy:
                    raise
                unanswered = True
        if unanswered:
            raise _holder_unavailable(self.name, response_id, self.config.routing.down_for)
        return False

    async def start(self) -> None:
        pass

    async def ready(self) -> bool:
        return True

    @property
    def failure(self) -> str | None:
        return None

    @property
    def stalled(self) -> str | None:
        return None

    def stats(self) -> dict[str, Any] | None:
        return {"routing": self.router.stats()}

    def flush_prefix_cache(self) -> int:
        return 0

    def hidden(self, answer: dict[str, Any], auth: str | None) -> dict[str, Any]:
        return self._replicas[0].hidden(answer, auth)  # (they share the model's api_key)

    def sampling_defaults(self) -> dict[str, float]:
        return self._replicas[0].sampling_defaults()

    async def close(self) -> None:
        for probe in list(self._probes):
            probe.cancel()
        await asyncio.gather(*(r.close() for r in self._replicas))

    async def _routed(self, request: GatewayRequest, call: Any, *, stream: bool) -> Any:
        """Send to the chosen replica; on failure before the first byte, to the next choice.

        NOTE: each replica makes one attempt (its own retries are off). One that does not accept
        the connection never saw the request: the next always gets it; a 5xx or 429 goes to
        another at most ``max_retries`` times. While another is left, a cachegate worker still
        loading its model answers 503 at once (``if_ready``), and is asked again last without it."""
        prompt = prompt_text(request.body, request.kind)
        responses = request.kind == "responses"
        pinned = self._pinned(request)
        tried: set[int] = set()
        loading: int | None = None  # (answered 503 to ``if_ready``: the others may be dead)
        retries = 0
        while True:
            route = self.router.choose(
                prompt, exclude=frozenset(tried), pinned=pinned, tenant=request.tenant
            )
            last = route.reason == "pinned" or len(tried) + 1 >= len(self._replicas)
            asked = request if last else dataclasses.replace(request, if_ready=True)
            try:
                result = await call(self._replicas[route.replica], asked)
                # (a replica that sends its stream's headers and hangs fails over here)
                primed = await _Primed.of(result, self._hold) if stream else None
            except UpstreamError as exc:
                self.router.release(route.replica)
                tried.add(route.replica)
                if await self._down(route.replica, exc):
                    self.router.mark_down(route.replica, self.config.routing.down_for)
                if route.reason == "pinned":  # no other replica holds what it refers to
                    raise self._pinned_failed(route.replica, exc, request) from None
                if not last and exc.upstream_code == "model_loading":  # (no other 503)
                    loading = route.replica  # (asked again, without if_ready, if others fail)
                left = len(tried) - (loading is not None and exc.replica_unhealthy)
                retries = self._again(route.replica, exc, left, retries, request.retries)
                if loading is not None and len(tried) == len(self._replicas):
                    tried, loading = tried - {loading}, None  # every other one failed
                continue
            except BaseException:
                self.router.release(route.replica)
                raise
            made = functools.partial(self._remember, route.replica)
            if not stream:
                self.router.release(route.replica)
                if responses:
                    made(result.body.get("id"))
                return result
            release = functools.partial(self.router.release, route.replica)
            broken = functools.partial(self._broken, route.replica)
            return _Released(primed or result, release, made if responses else None, broken)

    def _pinned(self, request: GatewayRequest) -> int | None:
        """The replica that made the ``previous_response_id`` the request names (None: none
        known here); when that replica is down and this gateway holds the conversation, the
        error on which ``responses.resent_if_lost`` sends the conversation instead."""
        previous = request.body.get("previous_response_id") if request.kind == "responses" else None
        pinned = self._made.get(previous) if isinstance(previous, str) else None
        if pinned is not None and request.standalone is not None and self.router.is_down(pinned):
            raise _not_held(previous)
        return pinned

    def _pinned_failed(
        self, replica: int, exc: UpstreamError, request: GatewayRequest
    ) -> UpstreamError:
        """What a request pinned to ``replica`` fails with after ``exc``: a replica gone (a
        killed worker) holds the previous response no more than a restarted one, so with the
        conversation held here the request goes on without it, on another replica (a request
        never retried, the audit's, only where the replica did no work: see ``_refused``)."""
        if not exc.replica_unhealthy or not exc.retryable:  # (slow, not down: see _down)
            return exc
        if request.standalone is None or not (request.retries or _refused(exc)):
            return exc
        self._failover(replica, exc)
        return _not_held(request.body.get("previous_response_id"))

    def _again(
        self, replica: int, exc: UpstreamError, tried: int, retries: int, retry: bool
    ) -> int:
        """After ``exc`` from ``replica``: the retries counted so far if another replica is
        to be tried, else ``exc`` raised (``retry``: the request's ``retries``)."""
        others_left = tried < len(self._replicas)
        if exc.code == "previous_response_not_found" and others_left:
            return retries  # made by a replica this process did not see make it: ask the next
        # 503: the replica refused the work, so like a refused connection, another
        # replica gets the request whatever max_retries says; so does one that waited
        # in vain for a connection to this replica (max_connections): never sent.
        if others_left and _refused(exc):
            self._failover(replica, exc)
            return retries
        if others_left and exc.retryable and retry and retries < self.config.max_retries:
            self._failover(replica, exc)
            return retries + 1
        # retried on other replicas already (a slow one's timeout is final: see ``_down``)
        if exc.retryable and retries:
            exc.final()
        raise exc

    async def _down(self, replica: int, exc: UpstreamError) -> bool:
        """Whether ``exc`` shows ``replica`` unhealthy, to be avoided for ``down_for``: e.g.
        a worker whose model failed to load answers 503 to everything (without this, prefix
        affinity would keep choosing it first).

        NOTE: a timeout alone does not tell a hung replica from a slow answer (a non-streamed
        generation longer than ``timeout.read``, which sends nothing until it is done): only
        one that does not answer ``GET /models`` either is down (as is a cachegate worker
        whose stream's keep-alives stopped, whatever it answers: ``_stalled``). One long
        generation marked every replica it failed over to down, and each forgot its prefixes.
        A slow one's timeout is not retried on another replica either (``retryable`` off): the
        generation may still run where it went, and it ran (and was billed) twice, its client
        waiting a read timeout for each, for the same 504. Nor by the client: its 504 says
        ``x-should-retry: false`` (``final``), which the OpenAI SDKs obey; they retry any other
        504, and each retry ran the generation again on the replica still running it.
        """
        if not exc.replica_unhealthy:
            if exc.broke_off:
                self._probe_soon(replica)
            return False
        if exc.code != "upstream_timeout" or exc.upstream_code == _ENGINE_STALLED:
            return True
        if not await self._replicas[replica].answers():
            return True
        exc.retryable = False
        exc.final()
        return False

    def _probe_soon(self, replica: int) -> None:
        """Mark ``replica`` down if it no longer answers ``GET /models/{model}``, in the
        background: its answer broke off (a killed worker?).

        NOTE: such a break was no sign at all: the next request went to the dead replica first,
        was refused, and only then failed over and marked it down. Asked before the error was
        raised, the probe held the client's error up to ``timeout.connect`` where a gone
        host's packets are dropped, not refused.
        """

        async def probe() -> None:
            try:
                if not await self._replicas[replica].answers():
                    self.router.mark_down(replica, self.config.routing.down_for)
            except Exception:  # (closed while it asked: a probe is no one's error)
                log.debug("model %s: probing replica %d failed", self.name, replica, exc_info=True)

        task = asyncio.get_running_loop().create_task(probe())
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _broken(self, replica: int, exc: UpstreamError) -> None:
        """A stream from ``replica`` failed after its first event: a replica that stopped
        answering is avoided like one that failed before it (``_down``: one that timed out
        but answers ``GET /models`` is slow, not hung; it was marked down all the same)."""
        if await self._down(replica, exc):
            self.router.mark_down(replica, self.config.routing.down_for)

    def _remember(self, replica: int, response_id: Any) -> None:
        if isinstance(response_id, str):
            self._made[response_id] = replica
            self._made.move_to_end(response_id)
            if len(self._made) > _MADE_MAX:
                self._made.popitem(last=False)

    def _failover(self, replica: int, exc: UpstreamError) -> None:
        """Log and count (``cachegate_upstream_retries_total``) a request sent on after ``exc``.

        NOTE: an error of this gateway's own (a timeout, a stalled worker's silence, no free
        connection) is named by its code: logged as the replica's ``HTTP 504`` or ``503``, it
        read as an answer the replica never sent."""
        if exc.unreachable:
            why = "unreachable"
        elif exc.upstream_status is not None:
            why = f"HTTP {exc.upstream_status}"
        else:
            why = exc.upstream_code or exc.code or f"HTTP {exc.status}"
        log.info("model %s: replica %d failed (%s); trying another", self.name, replica, why)
        if self._on_retry is not None:
            self._on_retry(self.name, "failover")


def _refused(exc: UpstreamError) -> bool:
    """Whether the replica did none of the work ``exc`` failed: it could not be reached, it
    answered 503, or no connection to it was free (``max_connections``)."""
    return exc.unreachable or exc.upstream_status == 503 or exc.code == "upstream_busy"


class _Primed:
    """A stream whose first event was read already (``None``: it had none).

    NOTE: a replica sends a stream's headers at once (vLLM, a cachegate worker) and its first
    event when it has one: a hung replica's failure shows only at that first read. Read
    before the stream is handed on, it is a failure before any byte reached the client, so
    the request fails over and the replica is avoided, as when it hangs before its headers.
    Comments (a worker's ``: queued`` after 50 ms in its queue, keep-alives) are held for up
    to ``hold`` seconds (the keep-alive interval asked for): handed on at the first, a stream
    that waited in a worker's queue no longer failed over when the worker then failed (its
    shutdown deadline), and its client got the error mid-stream.
    """

    def __init__(self, inner: BackendStream) -> None:
        self._inner = inner
        self.headers = inner.headers
        self._events = aiter(inner)  # (one iterator: the first event and the rest)
        self._first: list[StreamEvent] = []  # the comments held, then the first event

    @classmethod
    async def of(cls, stream: BackendStream, hold: float = 0.0) -> _Primed:
        """``stream`` with its first event read; on a failure, closed and the error raised."""
        primed = cls(stream)
        until = time.monotonic() + hold
        try:
            while not primed._first or _comment(primed._first[-1]):
                if primed._first and time.monotonic() >= until:
                    break  # (a long queue: its client gets the keep-alives from here on)
                primed._first.append(await anext(primed._events))
        except StopAsyncIteration:
            pass  # (it ended before its first event)
        except BaseException:
            await stream.aclose()
            raise
        return primed

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        for event in self._first:
            yield event
        if not self._first:
            return
        async for event in self._events:
            yield event

    def counted(self) -> dict[str, Any] | None:
        return self._inner.counted()

    async def aclose(self) -> None:
        await self._inner.aclose()


def _comment(event: StreamEvent) -> bool:
    """Whether ``event`` is a comment (a keep-alive, ``: queued``), no event of the answer."""
    return event.chunk is None and not (event.done or event.error)


class _Released:
    """A stream that tells the router when it is over (ended, broken or closed), and when it
    broke because its replica failed (``broken``)."""

    def __init__(
        self, inner: BackendStream, release: Any, made: Any = None, broken: Any = None
    ) -> None:
        self._inner = inner
        self.headers = inner.headers
        self._release = release
        self._made = made  # told the id of the Response the stream creates
        self._broken = broken
        self._done = False

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        try:
            async for event in self._inner:
                if self._made is not None and event.chunk is not None:
                    created = event.chunk.get("response")
                    if isinstance(created, dict):  # (response.created: the first event)
                        self._made(created.get("id"))
                        self._made = None
                yield event
        except UpstreamError as exc:
            if self._broken is not None:
                await self._broken(exc)
            raise
        finally:
            self._finish()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._finish()

    def counted(self) -> dict[str, Any] | None:
        return self._inner.counted()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._release()


#: Response ids a ``ReplicatedBackend`` remembers the replica of.
_MADE_MAX = 100_000

#: Request extension: when ``_Admission`` let the request go (monotonic seconds).
_ADMITTED = "cachegate.admitted_at"
#: Request extension: ``_Admission`` lets the request go at once, holding no turn.
_UNGATED = "cachegate.ungated"


def _salt(config: OpenAIModelConfig) -> str:
    """An upstream model's ``cache_salt``: the model its name stands for upstream, when set."""
    return f"upstream_model={config.upstream_model}" if config.upstream_model else ""


def _stale(exc: Exception, request: httpx.Request) -> bool:
    """Whether ``exc`` shows that the upstream never worked on ``request``: a kept-alive
    connection it had closed as idle, before any byte of an answer.

    NOTE: any other break may come after the upstream read the request and did (and billed)
    the work, or even answered it: a fresh connection closed, an answer cut or malformed.
    Sending it again would run it twice. httpcore (proxied upstreams) cannot say whether a
    connection was reused; its words for a close before any byte of the answer stand in.
    """
    if request.extensions.get(HANDLED):
        return isinstance(exc, StaleConnection)
    return str(exc) == "Server disconnected without sending a response."


def _proxy_mounts(limit: int, timeout: float) -> dict[str, httpx.AsyncBaseTransport | None]:
    """A transport through each proxy the environment names, by the URLs it is for.

    ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (lower case too), read as
    httpx reads them: a client given its own transport, as this one is, would ignore them.
    A proxied upstream goes through httpx's own transport (httpcore, which tunnels ``https``
    with ``CONNECT``); the others keep the lean one.

    NOTE: httpcore's pool has no limit of its own: ``_Admission`` is the only queue, as for
    the lean transport. Limited to ``max_connections`` too, it held the liveness check that
    is asked past that gate (``_UNGATED``) while the connections were all in use, until it
    gave up and the slow replica was taken for hung.
    """
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=limit)
    for pattern, url in get_environment_proxies().items():
        if url is None:  # NO_PROXY: the client's own transport
            mounts[pattern] = None
            continue
        try:
            proxied = httpx.AsyncHTTPTransport(proxy=httpx.Proxy(url), limits=limits)
        except (ImportError, ValueError) as exc:  # socks without socksio, a bad proxy URL
            raise ConfigError(f"the proxy {url!r} from the environment: {exc}") from None
        mounts[pattern] = _Admission(proxied, limit=limit, timeout=timeout)
    return mounts


class _Admission(httpx.AsyncBaseTransport):
    """At most ``limit`` requests on the wire; one that waits ``timeout`` s for its turn gets
    ``httpx.PoolTimeout`` (a ``503 upstream_busy``), and the turn is held until the response
    is closed.

    NOTE: httpcore's own pool timeout restarted whenever a freed connection was raced for
    (encode/httpcore#822), so under overload requests queued far past ``timeout`` (120
    requests on 4 connections with a 2 s pool timeout: all waited, the last 30 s), and the
    queue, tasks and sockets grew with the load a client sends. httpcore also walked its whole
    pool on every request and every closed response (a readability poll per connection, an
    O(n^2) idle count): at 200 requests in flight that took 47% of the event loop (py-spy,
    bench/overload.py with wrk). The transport now is gateway.http11's, which takes an idle
    connection in O(1) and queues nothing: this gate is the only queue.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, *, limit: int, timeout: float) -> None:
        self._inner = inner
        self._gate = asyncio.Semaphore(limit)
        self._timeout = timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.extensions.get(_UNGATED):  # (a probe: see UpstreamBackend.answers)
            return await self._inner.handle_async_request(request)
        try:
            async with asyncio.timeout(self._timeout):
                await self._gate.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"no connection free within {self._timeout}s", request=request
            ) from None
        request.extensions[_ADMITTED] = time.monotonic()
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            self._gate.release()
            raise
        if response.is_closed:  # read whole already (a test's MockTransport): nothing to hold
            self._gate.release()
            return response
        response.stream = _Releasing(response.stream, self._gate.release)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Releasing(httpx.AsyncByteStream):
    """A response body that gives its request's turn back when it is closed."""

    def __init__(self, stream: Any, release: Any) -> None:
        self._stream = stream
        self._release = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._release is not None:
                self._release()
                self._release = None


class UpstreamStream:
    """Events of an upstream SSE response, as they arrive (those that arrived together are
    marked ``more``, so the relay sends them in one write; see gateway.readahead)."""

    def __init__(
        self,
        name: str,
        response: httpx.Response,
        kind: str = "chat",
        rate_limits: bool = False,
        *,
        previous: str | None = None,
        secret: str | None = None,
        choices: Any = None,
        stalls: bool = False,
    ) -> None:
        self._name = name
        #: a worker's stream quiet for the read timeout has a stalled engine (``_read``)
        self._stalls = stalls
        self._secret = secret  # the model's api_key, hidden in what is relayed (see _hide)
        self._quoted = _quoted(secret)  # (its forms, for each event)
        self._response = response
        self._kind = kind
        self._previous = previous  # the previous_response_id its Response echoes (see _event)
        self.headers = relayed(response.headers, rate_limits=rate_limits)
        self._body: ReadAhead | None = None
        self._parser = SSEParser()
        self._ready: collections.deque[StreamEvent] = collections.deque()
        self._finished = False  # [DONE] was seen
        self._sequence = 0  # the number a Responses error event of the gateway's takes
        self._head = b""  # what ``opened`` read of the body to tell whether it is a stream
        #: a chat/completions stream's choices (``n``), those that finished, and whether its
        #: usage came: all finished and it did, the stream may end without [DONE] (``_ended``)
        self._choices = (choices if _is_count(choices) else 1) if kind in _CHOICES else 0
        self._finishes: set[int] = set()
        self._usage = False
        self._answered = False  # an event that is no error came (the model ran: ``counted``)

    async def opened(self) -> None:
        """Check that the answer is an event stream; if not, close it and raise a 502.

        NOTE: e.g. an error sent as a JSON body with status 200: said as what it was, not as a
        stream cut off. A type that only its body can tell (a proxy's
        ``application/octet-stream`` or ``text/plain``: the openai SDK reads any answer to a
        stream request as SSE) is a stream when its body opens as one; that was a 502.
        """
        streamed = _a_stream(self._response)
        if streamed is False:
            raise await _not_a_stream(self._name, self._response, self._secret)
        if streamed:
            return
        aiter(self)
        head = b""
        try:
            while not _SSE_HEAD.match(_opening(head)) and len(head) < _SNIFF_BYTES:
                head += await self._read()
        except StopAsyncIteration:
            pass
        except BaseException:
            await self.aclose()
            raise
        if not _SSE_OPENING.match(_opening(head)):
            await self.aclose()
            media = self._response.headers.get("content-type", "").partition(";")[0].strip()
            raise _no_stream(self._name, media, _hide(head, self._secret))
        self._head = head  # (the events' first bytes: read again first)

    def __aiter__(self) -> UpstreamStream:
        if self._body is None:
            self._body = ReadAhead(self._response.aiter_bytes())
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._ready:
            try:
                events = self._parser.feed(await self._read())
            except EventTooLarge as exc:
                raise _failure(
                    502, "upstream_error", f"Upstream for model '{self._name}' sent {exc}."
                ) from None
            except StopAsyncIteration:
                # (a CR-only stream's last CR ends its last event: it was lost)
                events = self._parser.end() or self._ended()
                if not events:
                    said = self._unstreamed()
                    if said is not None:
                        raise said from None
                    raise
            for i, raw in enumerate(events, start=1):
                # (an error event, a failed Response, may quote the key: see _hide)
                self._ready.append(self._event(_hidden(raw, self._quoted), more=i < len(events)))
            if self._parser.commented() and not events:
                # the upstream's keep-alive, passed on: the client's side of a quiet stream
                # (its read timeout, a proxy's idle timeout) stays alive as it would upstream
                self._ready.append(StreamEvent(KEEPALIVE, None))
        event = self._ready.popleft()
        self._finished = self._finished or event.done
        return event

    async def _read(self) -> bytes:
        """What arrived since the last read (StopAsyncIteration at the body's end)."""
        assert self._body is not None, "iterate the stream"
        if self._head:
            head, self._head = self._head, b""
            return head
        try:
            return await anext(self._body)
        except httpx.TimeoutException:
            stalled = self._stalls and self._parser.worker
            raise _stalled(self._name) if stalled else _timeout(self._name) from None
        except httpx.RequestError as exc:  # also DecodingError
            if self._never_ran():  # (a worker killed while the request was queued)
                raise _unreachable(self._name, exc) from None  # it did none of the work
            raise _broken(self._name, exc) from None

    def _event(self, data: bytes, *, more: bool) -> StreamEvent:
        event = _event(self._name, data, more=more, kind=self._kind, sequence=self._sequence,
                       previous=self._previous)  # fmt: skip
        if event.error and self._never_ran():  # (a worker's, its model never ran)
            raise _declined(self._name, event.chunk)  # it did none of the work: another may
        self._answered = self._answered or not event.error
        numbered = (event.chunk or {}).get("sequence_number")
        if isinstance(numbered, int):
            self._sequence = numbered + 1
        if self._choices and event.chunk is not None and not event.error:
            self._usage = self._usage or isinstance(event.chunk.get("usage"), dict)
            for choice in event.chunk.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                    index = choice.get("index", 0)
                    if isinstance(index, int) and 0 <= index < self._choices:
                        self._finishes.add(index)
        return event

    def _ended(self) -> list[bytes]:
        """``[DONE]`` for a chat/completions stream that closed without it once complete: each
        choice finished and its usage came (always asked for: see ``_payload``); else nothing.

        NOTE: some servers (ik_llama.cpp, older llama-box) send no ``[DONE]`` after the last
        chunk: their complete answers were a ``stream_incomplete`` error (the SDK raised), and
        never cached. A stream closed before that stays an error.
        """
        complete = self._choices and len(self._finishes) == self._choices and self._usage
        return [b"[DONE]"] if complete and not self._finished else []

    def _unstreamed(self) -> UpstreamError | None:
        """The error an upstream sent as a plain JSON body where its events were due
        (``{"error": ...}``, vLLM's ``{"object": "error", "message": ...}``), at the body's end.

        NOTE: some proxies answer a stream request with status 200 and ``text/event-stream``
        but such a body (no ``data:``): it was a stream of no events, a ``stream_incomplete``
        error, and the upstream's message was lost.
        """
        # (one that ended with a blank line, as an event does, was read as an event of no data)
        pending = self._parser.pending.strip() or self._parser.unread
        if len(pending) > _ERROR_BYTES:
            return None
        raw = _hide(pending, self._secret)
        try:
            body = _decode(raw)
        except msgspec.DecodeError:
            return None
        if not isinstance(body, dict):
            return None
        error = body.get("message") if body.get("object") == "error" else body.get("error")
        if not error:
            return None
        message, _ = _error_said(raw, error, "")
        return _failure(
            502, "upstream_error", f"Upstream for model '{self._name}' failed: {message}"
        )

    def counted(self) -> dict[str, Any] | None:
        """None: an upstream's usage is only what its stream reports. A cachegate worker
        tells the prompt tokens its model runs (``sse.RUNNING``: booked when the stream ends
        before its usage, a client that left mid-answer; they were 0); 0 for a request that
        its last comment said was still queued (``_never_ran``)."""
        if self._never_ran():
            return {"prompt_tokens": 0}
        told = self._parser.prompt_tokens
        return {"prompt_tokens": told} if told is not None else None

    def _never_ran(self) -> bool:
        """A cachegate worker's request that its last comment said was still queued
        (``sse.QUEUED``), with no event but an error since (its shutdown deadline, its engine
        closed): its model never ran it."""
        return self._parser.queued and not self._answered

    async def aclose(self) -> None:
        """Close the response; after ``[DONE]``, first read what is left of the body.

        NOTE: httpx returns a connection to the pool only when its response was read to the
        end; the chunked terminator follows ``[DONE]`` at once, and without reading it every
        streamed request would cost a new connection (a TLS handshake, upstream).
        """
        try:
            if self._body is not None:
                await self._body.aclose(drain=self._finished)
        finally:
            await self._response.aclose()


# ---------------------------------------------------------------------------------------------
# helpers

#: Where an OpenAI-compatible upstream counts a Response request's input tokens.
_COUNT_PATH = "responses/input_tokens"
_PATHS = {
    "chat": "chat/completions",
    "completion": "completions",
    "embedding": "embeddings",
    "responses": "responses",
}
#: The APIs whose streams are choices' chunks, ended by ``[DONE]``.
_CHOICES = frozenset({"chat", "completion"})
#: What an answer of each API holds its answer in (a list; an error has none, see _no_answer).
_ANSWERS = {"chat": "choices", "completion": "choices", "responses": "output"}
#: Events that end a Responses stream (it sends no ``[DONE]``).
_RESPONSES_END = frozenset({"response.completed", "response.incomplete", "response.failed"})


def prompt_cache_key(request: GatewayRequest) -> str:
    """The ``prompt_cache_key`` of a request that sets none: its tenant and stable prefix.

    NOTE: only what stays the same across a tenant's requests goes in (system and developer
    messages, instructions, tools): requests that share that prefix share a key, so the
    provider sends them to the prompt cache that holds it; the tenant keeps tenants apart.
    """
    body = request.body
    messages = body.get("messages") or ()
    system = [m for m in messages if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES]
    prefix = [request.tenant, system, body.get("instructions"), body.get("tools")]
    return "cg-" + hashlib.sha256(_encode_sorted(prefix)).hexdigest()[:32]


_SYSTEM_ROLES = ("system", "developer")
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _event(
    name: str,
    data: bytes,
    *,
    more: bool,
    kind: str = "chat",
    sequence: int = 0,
    previous: str | None = None,
) -> StreamEvent:
    # an event's data may span lines; each goes out with its own "data:" prefix again
    raw = b"data: " + data.replace(b"\n", b"\ndata: ") + b"\n\n"
    if kind == "responses":
        return _responses_event(name, data, raw, more=more, sequence=sequence, previous=previous)
    if data == b"[DONE]":
        return StreamEvent(raw, None, done=True)
    try:
        chunk = _decode(data)
    except msgspec.DecodeError:
        chunk = None
    if not isinstance(chunk, dict):
        detail = data[:200].decode("utf-8", "replace")
        return _error_event(name, f"sent an event that is not a JSON object: {detail!r}")
    if chunk.get("object") == "error":  # (vLLM's older error shape: no chunk, no "choices")
        return _error_event(name, f"failed mid-stream: {_vllm_said(chunk)}")
    error = chunk.get("error")
    if error is None:
        return StreamEvent(raw, chunk, more=more)
    if isinstance(error, dict) and error.get("code") == SHUTTING_DOWN_CODE:
        raise _shutting_down(name)  # (before its first event: another replica gets it)
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return StreamEvent(raw, chunk, error=True)  # an OpenAI error event: passed on as is
    return _error_event(name, f"failed mid-stream: {str(error)[:200]}")


def _responses_event(
    name: str, data: bytes, raw: bytes, *, more: bool, sequence: int, previous: str | None = None
) -> StreamEvent:
    """A Responses event: its ``event:`` line again (the parser keeps only data), whether it
    ends the stream, or is an ``error`` event; the Response it carries echoes ``previous``
    (see ``_echoed_previous``)."""
    try:
        chunk = _decode(data)
    except msgspec.DecodeError:
        chunk = None
    if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
        detail = data[:200].decode("utf-8", "replace")
        return _error_event(
            name, f"sent an event that is not a Responses event: {detail!r}", sequence=sequence
        )
    response = chunk.get("response")
    if isinstance(response, dict) and previous not in (None, response.get("previous_response_id")):
        chunk["response"] = {**response, "previous_response_id": previous}
        raw = b"data: " + _encode(chunk) + b"\n\n"
    if chunk.get("object") == "error":  # (vLLM's older error shape: its "type" names no event)
        return _error_event(name, f"failed mid-stream: {_vllm_said(chunk)}", sequence=sequence)
    kind = chunk["type"]
    raw = b"event: " + kind.encode() + b"\n" + raw
    if kind == "error":
        if chunk.get("code") == SHUTTING_DOWN_CODE:  # a cachegate worker's, as in _chat_event
            raise _shutting_down(name)
        return StreamEvent(raw, chunk, error=True)
    return StreamEvent(raw, chunk, done=kind in _RESPONSES_END, more=more)


def _vllm_said(chunk: dict[str, Any]) -> str:
    """The message of vLLM's older error, ``{"object": "error", "message": ..., "code": ...}``.

    NOTE: sent as a stream's event, it was relayed as a chunk: the openai SDK gave the client
    ``choices=None`` (a Responses client, an event of an unknown type), and the stream went on.
    """
    said = chunk.get("message")
    return (said if isinstance(said, str) else _encode(chunk).decode("utf-8", "replace"))[:200]


def _echoed_previous(request: GatewayRequest) -> str | None:
    """The ``previous_response_id`` a Response to ``request`` must echo where the upstream's
    would not: the client's, when the gateway sent the conversation in its place (inlined, or
    naming the upstream chain that conversation continues), as OpenAI echoes the id it was
    sent. None when the upstream was sent the client's own."""
    previous = request.previous if request.kind == "responses" else None
    return previous if request.body.get("previous_response_id") != previous else None


def _no_answer(name: str, body: dict[str, Any], member: str) -> UpstreamError:
    """A 200 without its answer (``member``: a chat/completions answer's ``choices``, a
    Response's ``output``): an error in another shape sent with status 200 (vLLM's
    ``{"object": "error", "message": ...}``, a web framework's ``{"detail": ...}``).

    NOTE: it was passed on as the answer: the openai SDK gave ``choices=None``, and the
    client's ``.choices[0]`` (``.output_text``) failed with a ``TypeError`` that said nothing
    of the upstream.
    """
    said = body.get("message") or body.get("detail")
    detail = said if isinstance(said, str) else _encode(body)[:200].decode("utf-8", "replace")
    return _failure(
        502, "upstream_error", f"Upstream for model '{name}' answered without {member}: {detail}"
    )


def _unreadable(kind: str, choices: list[Any]) -> str | None:
    """Why a chat/completions answer's ``choices`` hold no answer a client can read (None:
    they do). NOTE: ``[]``, ``[null]``, a message that is a string were passed on as a 200:
    the SDK's ``choices[0].message.content`` failed on them, saying nothing of the upstream.
    (A choice that leaves its message out is passed on, and not stored: the SDK reads it.)"""
    if not choices:
        return "answered with no choices"
    field, typed = ("message", dict) if kind == "chat" else ("text", str)
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict) or not isinstance(choice.get(field), typed | None):
            return f"answered a choice that is no choice, or its {field} of another type (choices[{i}])"
    return None


def _error_event(name: str, what: str, *, sequence: int | None = None) -> StreamEvent:
    """The gateway's error event for a stream the upstream broke: chat's ``{"error": ...}``,
    or numbered ``sequence`` in a Responses stream (its ``error`` event)."""
    error = _failure(502, "upstream_error", f"Upstream for model '{name}' {what}")
    raw = sse_error(error) if sequence is None else responses_error_event(error, sequence)
    return StreamEvent(raw, error.body(), error=True)


def _a_stream(response: httpx.Response) -> bool | None:
    """Whether a successful answer to a stream request is an event stream: True when its type
    says so (or says nothing), False when it cannot be one (no content, JSON, HTML), None
    when only its body can tell (see ``UpstreamStream.opened``). NOTE: a 204, a proxy's
    text/plain or HTML page, was read as a stream that ended at once: a 200 whose only event
    said ``stream_incomplete``."""
    media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media in ("text/event-stream", ""):
        return response.status_code != 204
    if response.status_code == 204 or media in _NOT_STREAMS or media.endswith("+json"):
        return False
    return None


async def _not_a_stream(name: str, response: httpx.Response, secret: str | None) -> APIError:
    raw, error = await _read_error(response, secret)
    if isinstance(error, dict):
        error = error.get("message")
    if error:
        return _failure(502, "upstream_error", f"Upstream for model '{name}' failed: {error}")
    media = response.headers.get("content-type", "").partition(";")[0].strip()
    return _no_stream(name, "HTTP 204 (no content)" if response.status_code == 204 else media, raw)


def _no_stream(name: str, what: str, raw: bytes) -> UpstreamError:
    text = raw[:200].decode("utf-8", "replace").strip()
    said = f": {text}" if text and not what.startswith("application/json") else "."
    return _failure(
        502,
        "upstream_error",
        f"Upstream for model '{name}' answered a stream request with {what}{said}",
    )


#: Types no event stream is sent as (an answer of one to a stream request is a 502 at once).
_NOT_STREAMS = frozenset({"application/json", "text/html"})
#: How an event stream's first line (``_opening``) starts: a comment or a field (``data:``, ...);
#: ``_SSE_HEAD``: enough of it read to tell (``_SNIFF_BYTES`` of the body at most).
_SSE_OPENING = re.compile(rb":|(?:data|event|id|retry)(?::|[\r\n]|\Z)")
_SSE_HEAD = re.compile(rb"[^\r\n]{6}|[^\r\n]+[\r\n]")
_SNIFF_BYTES = 1024


def _opening(body: bytes) -> bytes:
    """A body from its first line that is not blank (and without a UTF-8 byte order mark)."""
    return body.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")


def _bearer(auth: str) -> str:
    """The client's credential as an ``Authorization`` header: a Messages client's
    ``x-api-key`` (``"x-api-key <key>"``, see messages.client_credential), bridged to chat,
    goes as the bearer token."""
    prefix = "x-api-key "
    return "Bearer " + auth[len(prefix) :] if auth.startswith(prefix) else auth


#: Statuses whose ``Retry-After`` goes on to the client: rate limited, unavailable, and
#: Anthropic's ``overloaded_error``.
_SAYS_WHEN = frozenset({429, 503, 529})


def _told_wait(headers: httpx.Headers) -> float | None:
    """The seconds an error asks to wait: OpenAI's ``retry-after-ms``, which its SDKs read
    first (it was ignored: a 429 asking for 60 s was retried at once), else ``Retry-After``."""
    ms = _retry_after_ms(headers.get("retry-after-ms"))
    return ms if ms is not None else _retry_after(headers.get("retry-after"))


def _retry_after_ms(value: str | None) -> float | None:
    """``retry-after-ms`` in seconds; None unless a finite, non-negative number."""
    ms = _amount(value)
    return None if ms is None else ms / 1000


def _retry_after(value: str | None) -> float | None:
    seconds = _amount(value)
    if seconds is not None or not value or not value.isascii():
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _amount(value: str | None) -> float | None:
    """A header's finite, non-negative number; None otherwise. NOTE: a negative one is no
    delay-seconds (RFC 9110): ``Retry-After: -1`` was read as 0, and retried with no backoff."""
    if not value or not value.isascii():  # (float() reads other scripts' digits too)
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _error_said(raw: bytes, error: Any, reason: str) -> tuple[str, dict[str, Any]]:
    """The message of an upstream's error body (``error``: its ``error`` member, as read) and
    its ``type``, ``param`` and ``code``; the body's start, or ``reason``, without one."""
    message = ""
    fields: dict[str, Any] = {}
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        fields = {k: _field(error.get(k)) for k in ("type", "param", "code")}
    elif isinstance(error, str):
        message = error
    if not message:
        message = raw[:200].decode("utf-8", "replace").strip() or reason
    return message, fields


async def _upstream_error(
    name: str,
    response: httpx.Response,
    rate_limits: bool,
    *,
    retryable: bool,
    secret: str | None = None,
) -> UpstreamError:
    status = response.status_code
    message, fields = _error_said(*await _read_error(response, secret), response.reason_phrase)
    if status == 508 and fields.get("code") == "loop_detected":
        return UpstreamError(508, message, code="loop_detected", headers=dict(NO_RETRY))
    if status == 503 and fields.get("code") == SHUTTING_DOWN_CODE:
        return _shutting_down(name)
    # the upstream's request id and rate-limit state, as on an answer (to quote to support)
    headers = relayed(response.headers, rate_limits=rate_limits)
    retry_after = response.headers.get("retry-after")
    if status in _SAYS_WHEN and retry_after and _retry_after(retry_after) is not None:
        # NOTE: also on a 503 (passed on as 502) and an Anthropic 529 (as 529, see
        # AnthropicBackend._send): a wait longer than max_retry_wait was not waited here, and
        # without it the client's SDK retries within a second
        headers["retry-after"] = retry_after
    retry_after_ms = response.headers.get("retry-after-ms")
    if status in _SAYS_WHEN and _retry_after_ms(retry_after_ms) is not None:
        headers["retry-after-ms"] = str(retry_after_ms)  # (the SDKs read it first)
    if status >= 500 or status < 400:  # < 400: a redirect or other answer that is not one
        return UpstreamError(
            502,
            f"Upstream for model '{name}' failed with HTTP {status}: {message}",
            code="upstream_error",
            retryable=retryable,
            upstream_status=status,
            upstream_code=fields.get("code"),  # (model_loading: see ReplicatedBackend._routed)
            headers=headers,
        )
    return UpstreamError(
        status,
        message,
        type=fields.get("type"),
        param=fields.get("param"),
        code=fields.get("code"),
        headers=headers,
        retryable=retryable,
        upstream_status=status,
    )


async def _read_error(response: httpx.Response, secret: str | None = None) -> tuple[bytes, Any]:
    """Read and close an unwanted answer: its body (at most ``_ERROR_BYTES`` of it), and its
    ``error`` member if it has one; ``secret`` in it is replaced by ``***`` (see ``_hide``).

    NOTE: an error whose body did not end (a proxy's, a server streaming after its status)
    was read into memory for as long as it lasted, and its client waited as long.
    """
    read = bytearray()
    try:
        async for piece in response.aiter_bytes():
            read += piece
            if len(read) > _ERROR_BYTES:
                break
    except httpx.HTTPError:
        read.clear()
    finally:
        await response.aclose()
    raw = _hide(bytes(read), secret)
    try:
        body = _decode(raw)
    except msgspec.DecodeError:
        body = None
    return raw, body.get("error") if isinstance(body, dict) else None


def _hide(raw: bytes, secret: str | None) -> bytes:
    """``raw`` (what an upstream sent) with ``secret``, the model's ``api_key``, replaced by
    ``***``.

    NOTE: an upstream (a proxy, a self-hosted server) may quote the key it was sent in its
    error ("Incorrect API key provided: sk-..."), on a 400 or a 500 as well as on a 401, in an
    error sent with status 200, in an error event mid-stream or a failed Response: that went
    to the client, so one tenant could read the key all tenants share. A key shorter than
    ``_MIN_SECRET`` (``EMPTY``, ``none``: a placeholder for a server that checks none) is no
    secret, and replacing it would garble ordinary words.
    """
    return _hidden(raw, _quoted(secret))


def _hidden(raw: bytes, forms: tuple[bytes, ...]) -> bytes:
    """``raw`` with each of ``forms`` (``_quoted``) replaced by ``***``."""
    for form in forms:
        raw = raw.replace(form, b"***")
    return raw


def _quoted(secret: str | None) -> tuple[bytes, ...]:
    r"""``secret`` as an upstream may quote it: as it is, and as a JSON string holds it (``"``
    and ``\`` escaped; ``/`` as ``\/``, as PHP writes it; ``<>&`` as ``\u003c``..., as Go
    writes them, and ``='`` too, as Gson does); none for no secret (see ``_hide``).

    NOTE: a key with one of those (a base64 one, as Amazon Bedrock's, has ``/`` and ``=``) was
    hidden only where quoted as it is: an error's JSON gave it whole once decoded. Made per
    request (a stream's once: ``UpstreamStream``), never cached: the secret may be a client's
    own key (``_sent_key``), and a module-wide cache kept the last 256 after their requests.
    """
    if not secret or len(secret) < _MIN_SECRET:
        return ()
    plain = secret.encode("utf-8", "surrogatepass")
    try:
        escaped = _encode(secret)[1:-1]
    except (msgspec.EncodeError, UnicodeEncodeError):  # (a lone surrogate)
        return (plain,)
    forms = [plain, escaped, escaped.replace(b"/", b"\\/")]
    for unsafe in (b"<>&", b"<>&='"):  # (what Go escapes, what Gson does)
        html = escaped
        for c in unsafe:
            html = html.replace(bytes([c]), b"\\u%04x" % c)
        forms.append(html)
    return tuple(dict.fromkeys(forms))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _field(value: Any) -> str | None:
    """An error's ``type``/``param``/``code`` as the OpenAI SDKs expect it: a string or null."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _own_key_refused(name: str, refused: UpstreamError) -> UpstreamError:
    """The upstream refused the model's configured ``api_key``: the operator's problem, not
    the client's. Its message (which may quote part of that key) goes to the log only."""
    log.warning("upstream %s refused the configured api_key: %s", name, refused.message)
    return UpstreamError(
        502,
        f"The upstream for model '{name}' refused this gateway's credentials "
        f"(HTTP {refused.status}); the gateway's operator has been told in its log.",
        code="upstream_auth_error",
        upstream_status=refused.status,
        headers=refused.headers,
    )


def _ascii(headers: dict[str, str]) -> dict[str, str]:
    """``headers``, or a 400 when one is not ASCII (httpx refuses those: it was a 500).

    NOTE: only what comes from the client can be: its own key or account headers."""
    if not all(value.isascii() for value in headers.values()):
        raise APIError(
            400,
            "A header passed on to the upstream (Authorization, x-api-key or an "
            "organization/project header) is not ASCII text.",
            code="invalid_header",
        )
    return headers


def _timeout(name: str) -> APIError:
    # retryable: for replicas, another one may answer (this one is marked down meanwhile)
    message = f"Upstream for model '{name}' timed out."
    return UpstreamError(504, message, code="upstream_timeout", retryable=True)


def _silence_tells_stalls(read: float) -> bool:
    """Whether a cachegate worker's stream quiet for ``read`` (``timeout.read``) shows that its
    engine is stalled (``_stalled``): two of its keep-alive intervals fit in ``read``.

    NOTE: the worker looks whether to send a keep-alive once per interval (``read / 3``, but
    ``KEEPALIVE_MIN`` at least, whatever is asked), and sends none while a step has run that
    long: only two missed in a row show one step that ran two intervals (its own bound for a
    stall; a shorter step ends before the next look). With ``read`` of 1 s or less, fewer fit
    (none at 0.5 s or less): a healthy worker's stream queued for ``read``, or one step of
    0.5 s, timed out, was said stalled and its worker skipped for ``routing.down_for``.

    >>> [_silence_tells_stalls(r) for r in (0.4, 0.9, 1.0, 1.2, 2.0, 120.0)]
    [False, False, False, True, True, True]
    """
    interval = min(_HOLD_MAX, max(KEEPALIVE_MIN, read / _KEEPALIVE_SHARE))
    return read > _STALL_INTERVALS * interval


def _stalled(name: str) -> UpstreamError:
    """A cachegate worker's stream quiet for ``timeout.read`` (over 1 s: see
    ``_silence_tells_stalls``): the worker sends a keep-alive after ``timeout.read / 3`` of
    silence unless one step of its engine has run that long, so that step has run past two
    keep-alive intervals, its own bound for a stalled engine (``upstream_code``: what it
    answers, ``engine_stalled``, once that bound and its 5 s minimum have passed).

    NOTE: with ``timeout.read`` under 7.5 s that minimum, not two intervals, is the worker's
    bound, which need not have passed at this timeout (under 5 s, it cannot have): its
    ``GET /models`` answered (slow, not hung: ``ReplicatedBackend._down``), so the stalled
    worker was not skipped, and new requests sent to it waited ``timeout.read`` each for a
    plain timeout.
    """
    message = (
        f"Upstream for model '{name}' timed out: the worker stopped sending keep-alives, "
        "so its engine is stalled (one step has run past timeout.read)."
    )
    return UpstreamError(
        504, message, code="upstream_timeout", retryable=True, upstream_code=_ENGINE_STALLED
    )


def _shutting_down(name: str) -> UpstreamError:
    """A cachegate upstream (a worker) whose shutdown deadline ended the request: its own
    words ("The gateway is shutting down") would mislead this gateway's clients."""
    message = f"Upstream for model '{name}' is shutting down; send the request again."
    return UpstreamError(
        503, message, code="upstream_unavailable", retryable=True, upstream_status=503
    )


def _declined(name: str, chunk: dict[str, Any] | None) -> UpstreamError:
    """A cachegate worker's error event for a request still in its queue (its engine failed or
    closed): as a 503, the request goes to another replica (before its first event)."""
    error = (chunk or {}).get("error", chunk)
    said = error.get("message") if isinstance(error, dict) else None
    message = f"Upstream for model '{name}' failed the request before running it: {said}"
    return UpstreamError(
        503, message, code="upstream_unavailable", retryable=True, upstream_status=503
    )


def _not_held(response_id: Any) -> UpstreamError:
    """The replica that made ``response_id`` is down: what an upstream that no longer holds it
    answers (``previous_response_not_found``), so that the conversation is sent instead."""
    message = f"Previous response with id '{response_id}' not found."
    return UpstreamError(
        400, message, param="previous_response_id", code="previous_response_not_found"
    )


def _holder_unavailable(name: str, response_id: str, down_for: float) -> UpstreamError:
    """A delete that the upstream (a replica) which may hold the response could not answer."""
    message = (
        f"The upstream of model '{name}' that may hold response '{response_id}' is unavailable; "
        "nothing was deleted. Send the delete again (a restarted worker holds no responses)."
    )
    retry_after = {"retry-after": str(max(1, math.ceil(down_for)))}
    return UpstreamError(503, message, code="upstream_unavailable", headers=retry_after)


def _busy(name: str, connections: int) -> APIError:
    message = (
        f"All {connections} connections to the upstream for model '{name}' are in use "
        "(max_connections); try again later."
    )
    return UpstreamError(503, message, code="upstream_busy")


def _unreachable(name: str, exc: Exception, *, final: bool = False) -> UpstreamError:
    message = f"Upstream for model '{name}' is unreachable: {exc!r}"
    error = UpstreamError(
        502, message, code="upstream_unreachable", retryable=True, unreachable=True
    )
    if final:  # retried here already: a client should not
        error.final()
    return error


def _broken(name: str, exc: Exception) -> UpstreamError:
    error = _failure(502, "upstream_error", f"Upstream for model '{name}' broke off: {exc!r}")
    error.broke_off = True
    return error


def _failure(status: int, code: str, message: str) -> UpstreamError:
    return UpstreamError(status, message, code=code)


#: Seconds before an upstream that could not describe its model is asked again, and how many
#: answers without a context window it may give before it is not asked any more.
_WINDOW_RETRY_S = 10.0
_WINDOW_ASKS = 6

#: A cachegate upstream is asked for a keep-alive at least every ``timeout.read`` / this.
_KEEPALIVE_SHARE = 3

#: Keep-alive intervals a worker's stream must be quiet for to show a stalled engine (as the
#: worker's own ``local._STALLED_INTERVALS``).
_STALL_INTERVALS = 2

#: The longest a replica's stream is held back for its first event while only comments come:
#: the longest a worker waits before its keep-alive (``local._KEEPALIVE_EVERY``).
_HOLD_MAX = 15.0

#: A connection that fails within this long of sending was closed before the upstream read the
#: request (a stale keep-alive): safe to send again.
_STALE_CONNECTION_S = 0.25

#: The most of an error answer's body read (an error's JSON is far smaller).
_ERROR_BYTES = 1 << 20
#: The shortest ``api_key`` hidden in what an upstream sent (see ``_hide``).
_MIN_SECRET = 8

#: A cachegate worker's code for an engine stuck in one step (``_stalled``).
_ENGINE_STALLED = "engine_stalled"

#: Statuses that say a replica is unhealthy rather than that one request failed.
_UNHEALTHY = frozenset({502, 503, 504})


class UpstreamError(APIError):
    """An upstream failure. ``retryable``: nothing reached the client and the request may go
    to another replica; ``unreachable``: the replica did not even accept a connection;
    ``upstream_status``: the HTTP status the upstream answered (None: it did not answer);
    ``upstream_code``: the code of its error, where ``code`` is the gateway's own (a 5xx's)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        retryable: bool = False,
        unreachable: bool = False,
        upstream_status: int | None = None,
        upstream_code: str | None = None,
        **fields: Any,
    ) -> None:
        fields.setdefault("type", "upstream_error" if status >= 500 else None)
        super().__init__(status, message, **fields)
        self.retryable = retryable
        self.unreachable = unreachable
        self.upstream_status = upstream_status
        self.upstream_code = upstream_code
        self.broke_off = False  # the connection broke mid-answer (``_broken``)

    def final(self) -> None:
        """Tell clients not to retry: this gateway already did (the OpenAI SDKs obey
        ``x-should-retry: false``; without it each SDK retry ran all of ours again)."""
        self.headers.update(NO_RETRY)

    @property
    def replica_unhealthy(self) -> bool:
        """The replica itself is the problem (down, unavailable, or failing behind a proxy)."""
        return (
            self.unreachable
            or self.upstream_status in _UNHEALTHY
            or self.code == "upstream_timeout"  # accepts connections, never answers (hung)
        )
