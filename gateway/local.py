"""The ``local`` backend: the bundled model (or any HF model directory) run in this process.

It turns an OpenAI request into token ids (chat template or raw prompt) and sampling
parameters, runs it on ``localmodel``'s engine — which reuses the KV of the longest prompt
prefix any earlier request computed — and shapes the result as an OpenAI response or stream,
with ``usage.prompt_tokens_details.cached_tokens``.

Requests that ask for what the local model cannot do (tools, JSON mode, logprobs, penalties)
get a 400 naming the parameter rather than an answer that silently ignores it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import torch

from localmodel import (
    AsyncEngine,
    Completion,
    Engine,
    EngineClosedError,
    EngineConfig,
    Event,
    Finished,
    GenerationRequest,
    SamplingError,
    SamplingParams,
    TextDelta,
    kernel,
)
from localmodel.lean import layer_counts
from localmodel.weights import in_use as weights_in_use
from semantic._daemon import on_daemon_thread

from .backend import OPENAI_SAMPLING, Answer, Meter, StreamEvent
from .config import Config, LocalModelConfig
from .errors import APIError, no_content
from .requests import KEEPALIVE_MIN, GatewayRequest
from .sse import DONE, QUEUED, RUNNING, encode_event, fresh_identity

__all__ = ["LocalBackend"]

log = logging.getLogger(__name__)

#: A comment line sent while a long prefill runs, so proxies do not time the stream out: every
#: 15 s, or as often as the gateway in front asks (``x-cachegate-keepalive``: its read timeout).
_KEEPALIVE = b": keep-alive\n\n"
_KEEPALIVE_EVERY = 15.0
#: How often a stream for a gateway in front looks whether the engine took its request up, until
#: it has (``QUEUED``): a request that starts within it is never said to be queued.
_QUEUED_POLL = 0.05
#: Keep-alive intervals one step of the engine may run before the engine is taken for hung
#: (``LocalBackend.stalled``): two thirds of the front's ``timeout.read``, the longest step
#: that never times a stream out there.
_STALLED_INTERVALS = 2
#: The shortest such run, whatever a request's ``x-cachegate-keepalive`` says: any client of a
#: gateway's own local model can send that header, and at 0.5 s a step of 1 s (a long prefill
#: on a loaded CPU) made the model refuse every request and /readyz answer 503 until it ended.
_STALLED_MIN = 5.0


class LocalBackend:
    """A ``local`` model: loads in the background; ``ready()`` turns true once it has.

    ``load`` builds the engine on a worker thread (default: load the model and warm it up);
    tests pass one whose timing they control.
    """

    forwards_client_auth = False
    apis = frozenset({"chat", "completion"})  # others through their adapter's chat bridge

    def __init__(
        self,
        name: str,
        config: LocalModelConfig,
        engine_config: EngineConfig,
        *,
        load: Callable[[EngineConfig], Engine] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.engine_config = engine_config
        # NOTE: the settings an answer depends on when a request leaves them unset (and the
        # model itself); not those that change only its speed or memory (weights, kv_dtype)
        c = engine_config
        self.cache_salt = repr(("local", str(c.source), c.default_max_tokens,
                                c.default_temperature, c.default_top_p, c.default_top_k,
                                c.max_context, c.context_overflow, c.sink_tokens))  # fmt: skip
        self._load_engine = load or _load_and_warm
        self._engine: AsyncEngine | None = None
        self._loader: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._handover = threading.Lock()  # (the load's thread and close: who closes its engine)
        self._loading = threading.Event()  # (set while the load's thread runs)
        self._created = int(time.time())
        #: The keep-alive interval the last request that asked for one asked for
        #: (``x-cachegate-keepalive``: a gateway in front's ``timeout.read`` / 3), for ``stalled``
        self._keepalive = _KEEPALIVE_EVERY

    @classmethod
    def from_config(cls, name: str, model: LocalModelConfig, config: Config) -> LocalBackend:
        threads = model.threads or max(1, available_cpus() - 1)  # leave a core to HTTP
        engine_config = EngineConfig(
            source=model.source,
            data_dir=Path(config.data_dir),
            device=model.device,
            dtype=model.dtype,
            max_context=model.max_context,
            prefix_cache_bytes=model.prefix_cache_bytes,
            prefix_ttl_s=model.prefix_cache_ttl,
            prefix_disk_dir=Path(model.prefix_disk_dir) if model.prefix_disk_dir else None,
            prefix_disk_bytes=model.prefix_disk_bytes,
            default_max_tokens=model.default_max_tokens,
            default_temperature=model.default_temperature,
            default_top_p=model.default_top_p,
            default_top_k=model.default_top_k,
            max_batch=model.max_batch,
            step_tokens=model.step_tokens,
            kv_dtype=model.kv_dtype,
            weights=model.weights,
            context_overflow=model.context_overflow,
            sink_tokens=model.sink_tokens,
            kv_pool_bytes=model.kv_pool_bytes,
            page_size=model.page_size,
            threads=threads,
        )
        return cls(name, model, engine_config)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the model off the event loop; requests wait for it (readyz says 503 meanwhile)."""
        if self._loader is None:
            self._loader = asyncio.create_task(self._load(), name=f"load-{self.name}")

    async def ready(self) -> bool:
        return self._engine is not None  # (a stall aside: ``stalled``, see Backend.ready)

    @property
    def stalled(self) -> str | None:
        """Why the loaded engine cannot serve now (None: it can): one step of it has run
        ``_STALLED_INTERVALS`` keep-alive intervals (``_STALLED_MIN`` s at least), hung (its
        thread alive, a step that never
        ends) or too slow for any stream on it to be heard from in time. Until that step
        ends, ``/readyz`` and ``GET /v1/models/{id}`` say so (503), and new requests get 503
        ``engine_stalled`` at once (``_serving_engine``)."""
        stuck = self._engine.stuck_for() if self._engine is not None else 0.0
        bound = self._stalled_after()
        if stuck < bound:
            return None
        return f"one step of its engine has run for {stuck:.1f} s (hung: past {bound:g} s)"

    def _stalled_after(self) -> float:
        """Seconds one step may run before the engine is ``stalled``."""
        return max(_STALLED_MIN, _STALLED_INTERVALS * self._keepalive)

    @property
    def loading(self) -> bool:
        """Whether the load still runs on its thread (which ``close`` does not wait for)."""
        return self._loading.is_set()

    @property
    def left_running(self) -> bool:
        """Whether ``close`` left the engine's thread running: a step that did not end
        (``stalled``), not waited for."""
        return self._closed and self._engine is not None and self._engine.running

    @property
    def failure(self) -> str | None:
        """Why the model could not load (it will not be retried), or None."""
        return repr(self._error) if self._error is not None else None

    async def close(self) -> None:
        """Stop serving and close the engine; a load still in progress is not waited for.

        NOTE: a load runs on a thread that cannot be interrupted (the bundled model's first
        conversion takes up to a minute). Waiting for it held Ctrl-C or SIGTERM that long, so
        the load runs on a daemon thread that a process ending does not wait for (while it is
        ``loading``, ``cachegate serve`` exits with ``os._exit``), and the engine that load
        makes after close is closed on that thread (its disk writer thread and files), or by
        ``_load`` when it was handed over just before close.
        """
        with self._handover:
            self._closed = True
        if self._loader is not None and not self._loader.done():
            log.warning("local model %s is still loading: shutting down without it", self.name)
        if self._engine is not None:  # (a hung engine's thread is left behind: see stalled)
            await self._engine.aclose(stuck=self._stalled_after())

    # -- Backend ---------------------------------------------------------------------------

    def check(self, request: GatewayRequest) -> None:
        """A 400 for a request the model cannot serve by what it carries, before the cache is
        looked in: an answer stored for one (by an older build, another version sharing the
        Redis) is never served. In the order ``_prepare`` finds them: its sampling parameters
        (``_params``), then a chat turn it cannot read (no content, a tool call or its answer:
        ``_check_messages``) or not one completions prompt (``_prompt``). Nothing is tokenized
        here: what needs the prompt's tokens (its length) is refused by ``_prepare``."""
        engine = self._engine.engine if self._engine is not None else None
        self._params(request, engine)
        if request.kind == "chat":
            _check_messages(request.body["messages"])
        else:
            _prompt(request.body)

    def as_sent(self, request: GatewayRequest) -> GatewayRequest:
        return request

    async def complete(
        self, request: GatewayRequest, auth: str | None = None, meter: Meter | None = None
    ) -> Answer:
        """The whole answer; ``meter`` counts the prompt it ran and the tokens it generated
        so far (``LocalStream.counted``), for a client that leaves before the answer."""
        created = int(time.time())  # (its ``created``: when it was asked for, as a stream's)
        engine = await self._serving_engine(request)
        job = await self._prepare(engine.engine, request)
        deltas = 0
        if meter is not None:
            meter.counted = lambda: _counted(job, deltas)
        try:
            async for event in engine.stream(job):
                if isinstance(event, TextDelta):
                    deltas += 1
                elif isinstance(event, Finished):
                    return Answer(_response(request, self.name, event.completion, created))
        except EngineClosedError as exc:
            raise APIError(503, str(exc), code="model_unavailable") from None
        raise AssertionError("stream ended without a Finished event")

    async def open_stream(self, request: GatewayRequest, auth: str | None = None) -> LocalStream:
        engine = await self._serving_engine(request)
        job = await self._prepare(engine.engine, request)  # a 400 happens before any header
        every = _keepalive_every(request.keepalive)
        return LocalStream(request, self.name, job, engine.stream(job), keepalive=every,
                           stuck_for=engine.stuck_for)  # fmt: skip

    async def count_tokens(self, request: GatewayRequest, auth: str | None = None) -> int:
        """The prompt tokens of a chat request (``POST /v1/messages/count_tokens``,
        ``/v1/responses/input_tokens``); a 400 for what a create would refuse (tools, ...)."""
        engine = await self._ready_engine(request.if_ready)
        _sampling(request.body, request.kind)
        try:
            max_tokens = _max_tokens(request.body)
            return len(await asyncio.to_thread(_fitted, engine.engine, request, max_tokens))
        except ValueError as exc:  # InvalidPromptError: the chat template refused the turns
            raise APIError(400, str(exc), param="messages", code="invalid_value") from None

    async def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "id": self.name,
            "object": "model",
            "created": self._created,
            "owned_by": "cachegate",
        }
        if self._engine is not None:
            described["context_window"] = self._engine.engine.context_window
        return described

    def stats(self) -> dict[str, Any] | None:
        if self._engine is None:
            return {"loaded": False, "error": repr(self._error) if self._error else None}
        stats = self._engine.engine.stats
        cache = stats.prefix
        weights = weights_in_use(self._engine.engine.model)
        out: dict[str, Any] = {
            "loaded": True,
            "pending": self._engine.pending,
            "weights": weights,
            **self._threads(weights),
            "layers": layer_counts(self._engine.engine.model),
            "prefix_cache": {
                "queried_tokens": cache.queried_tokens,
                "hit_tokens": cache.hit_tokens,
                "hit_rate": round(cache.hit_rate, 4),
                "tokens": cache.tokens,
                "bytes": cache.bytes,
                "max_bytes": cache.max_bytes,
                "evicted_tokens": cache.evicted_tokens,
                "evictions": cache.evictions,
                "nodes": cache.nodes,
            },
            "kv_pool": dataclasses.asdict(stats.pool),
        }
        if stats.disk is not None:
            out["prefix_disk"] = {
                **dataclasses.asdict(stats.disk),
                "served_tokens": stats.disk_hit_tokens,
            }
        if stats.break_even is not None:
            out["prefix_disk_break_even"] = stats.break_even.as_dict()
        return out

    def _threads(self, weights: str) -> dict[str, int | None]:
        """``threads``: the engine's torch threads; ``kernel_threads``: what a call of the
        native kernels runs on (1 where they were built without OpenMP), None where the model
        does not run on them (GPU, oneDNN, half or bfloat16 weights)."""
        threads = self.engine_config.threads or torch.get_num_threads()
        native = weights in ("native", "int8")
        return {"threads": threads,
                "kernel_threads": kernel.threads_per_call(threads) if native else None}  # fmt: skip

    def flush_prefix_cache(self) -> int:
        """Drop every cached prefix (admin); returns the bytes freed."""
        return self._engine.engine.flush_prefix_cache() if self._engine is not None else 0

    def hidden(self, answer: dict[str, Any], auth: str | None) -> dict[str, Any]:
        return answer  # (it was sent no key)

    def sampling_defaults(self) -> dict[str, float]:
        """The model's own (its generation_config or model card, under the YAML's)."""
        if self._engine is None:
            return dict(OPENAI_SAMPLING)  # (not loaded: it has answered nothing yet)
        d = self._engine.engine.sampling_defaults
        return {"temperature": d.temperature, "top_p": d.top_p}

    # -- helpers ---------------------------------------------------------------------------

    async def _load(self) -> None:
        if self._closed:
            return
        started = time.perf_counter()
        try:
            engine = await on_daemon_thread(
                self._load_or_drop, name=f"load-{self.name}", running=self._loading
            )
        except Exception as exc:
            self._error = exc
            log.exception("local model %s failed to load", self.name)
            return
        if engine is None:  # close() came during the load; its thread closed the engine
            return
        if self._closed:  # close() came during the handover: no one will serve or close it
            await asyncio.to_thread(engine.close)
            return
        self._engine = AsyncEngine(engine, name=f"localmodel-{self.name}")
        self._engine.start()
        log.info("local model %s loaded in %.1fs", self.name, time.perf_counter() - started)

    def _load_or_drop(self) -> Engine | None:
        """The load, on its thread: the engine, or None when close() came meanwhile."""
        engine = self._load_engine(self.engine_config)
        with self._handover:
            if not self._closed:
                return engine
        engine.close()
        return None

    async def _ready_engine(self, if_ready: bool = False) -> AsyncEngine:
        """The engine, once loaded; ``if_ready``: a 503 at once while it loads (the gateway in
        front has other replicas: a restarted worker took their requests and kept them
        waiting for its load)."""
        loader = self._loader if self._engine is None and self._error is None else None
        if loader is not None and if_ready and not self._closed:
            raise APIError(503, f"The local model `{self.name}` is still loading.",
                           code="model_loading")  # fmt: skip
        if loader is not None:
            await asyncio.shield(loader)
        if self._engine is None:
            raise APIError(
                503,
                f"The local model `{self.name}` is not available: {self._why_unavailable()}",
                code="model_unavailable",
            )
        return self._engine

    async def _serving_engine(self, request: GatewayRequest) -> AsyncEngine:
        """The engine for a generation (``_ready_engine``), or 503 ``engine_stalled`` at once
        while it is ``stalled``.

        NOTE: a hung engine took every new request into its queue, where it waited for its
        reader's timeout (a gateway in front: ``timeout.read``, then 504); that front, whose
        liveness check (``GET /models``) the worker still answered, never skipped it, so each
        request sent there waited as long for the same 504, and none went to another replica.
        """
        if request.keepalive is not None:
            self._keepalive = _keepalive_every(request.keepalive)
        engine = await self._ready_engine(request.if_ready)
        if (why := self.stalled) is not None:
            raise APIError(503, f"The local model `{self.name}` is stalled: {why}.",
                           code="engine_stalled")  # fmt: skip
        return engine

    def _why_unavailable(self) -> str:
        if self._error is not None:
            return str(self._error)
        return "shut down" if self._closed else "not started"

    def _max_output(self, engine: Engine | None) -> int | None:
        """The most output tokens a request may ask for (``max_output_tokens``); by default
        the context window with ``context_overflow: sinks``, where nothing else bounds it
        (None while ``engine`` is: the model is loading, its window not known yet)."""
        if self.config.max_output_tokens is not None:
            return self.config.max_output_tokens
        sinks = self.config.context_overflow == "sinks"
        return engine.context_window if sinks and engine is not None else None

    def _params(self, request: GatewayRequest, engine: Engine | None) -> SamplingParams:
        """The request's sampling parameters, or a 400 for them (``_sampling``) or for more
        output tokens than the model gives one request (``_max_output``)."""
        body = request.body
        if request.top_k is not None:  # a bridged request's (not in its chat body)
            body = {**body, "top_k": request.top_k}
        params = _sampling(body, request.kind)
        bound = self._max_output(engine)
        _within_output_limit(params.max_tokens, bound, body)
        if (
            params.max_tokens is None
            and bound is not None
            and bound < self.config.default_max_tokens
        ):
            # the window's bound with sinks (the config holds a set one above the default):
            # past it, a request that set no max_tokens got what one asking for it could not
            params = dataclasses.replace(params, max_tokens=bound)
        return params

    async def _prepare(self, engine: Engine, request: GatewayRequest) -> GenerationRequest:
        body = request.body
        params = self._params(request, engine)
        namespace = (
            self.name
            if self.config.share_prefix_across_tenants
            else f"{self.name}|{request.tenant}"
        )
        tokens: list[int] = []
        try:
            tokens = await asyncio.to_thread(_fitted, engine, request, params.max_tokens)
            return engine.prepare(tokens, params, namespace=namespace)
        except ValueError as exc:  # InvalidRequestError, ContextWindowExceeded, InvalidPromptError
            code = "context_length_exceeded" if "context length" in str(exc) else "invalid_value"
            param = "messages" if request.kind == "chat" else "prompt"
            if str(exc).startswith("n > 1"):
                param = "n"
            fits = 0 < len(tokens) < engine.context_window  # then max_tokens is what overflows
            if code == "context_length_exceeded" and _max_tokens(body) is not None and fits:
                param = (
                    "max_completion_tokens" if body.get("max_completion_tokens") else "max_tokens"
                )
            raise APIError(400, str(exc), param=param, code=code) from None


class LocalStream:
    """A local generation as OpenAI SSE events; closing it cancels the generation."""

    def __init__(
        self,
        request: GatewayRequest,
        model: str,
        job: GenerationRequest,
        events: AsyncGenerator[Event, None],
        *,
        keepalive: float = _KEEPALIVE_EVERY,
        stuck_for: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self._request = request
        self._keepalive = keepalive  # seconds of silence before a keep-alive comment
        self._stuck_for = stuck_for  # how long the engine's running step has taken
        self._model = model
        self._job = job
        self._events = events
        self.headers: dict[str, str] = {}  # nothing to relay: no upstream
        self._deltas = 0  # text deltas generated (each one token, or more)
        #: A gateway in front asked for keep-alives: it is told while the request waits for
        #: the engine (``QUEUED``), so that it books no model call should its client leave
        #: then (as this gateway does not: ``counted``). False once the engine has taken it.
        self._watching = request.keepalive is not None
        self._queued = False  # QUEUED was the last thing sent
        self._queued_at = 0.0  # (loop time)

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        kind = self._request.kind
        rid, created = fresh_identity(kind)
        head = {"id": rid, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                "created": created, "model": self._model}  # fmt: skip
        started: set[int] = set()
        pending: asyncio.Task[Event] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(self._events))
                wait = _QUEUED_POLL if self._watching else self._keepalive
                done, _ = await asyncio.wait({pending}, timeout=wait)
                if not done:
                    if (comment := self._quiet(asyncio.get_running_loop().time())) is not None:
                        yield StreamEvent(comment, None)
                    continue
                event, pending = pending.result(), None
                if self._watching and self._job.started.is_set():  # (its prompt, to the front)
                    yield StreamEvent(self._running(), None)
                self._watching = False  # (an event: the engine took the request up)
                if isinstance(event, TextDelta):
                    self._deltas += 1
                for chunk in _chunks(kind, head, event, started):
                    yield StreamEvent(encode_event(chunk), chunk)
                if isinstance(event, Finished):
                    yield StreamEvent(DONE, None, done=True)
                    return
        except StopAsyncIteration:
            return
        except EngineClosedError as exc:
            raise APIError(503, str(exc), code="model_unavailable") from None
        finally:
            await self._close(pending)

    async def aclose(self) -> None:
        await self._close(None)

    def _quiet(self, now: float) -> bytes | None:
        """The comment to send after a wait with no event (None: none yet): a keep-alive; to
        a gateway in front, ``QUEUED`` (as its keep-alive too) while the engine has not taken
        the request up, then ``RUNNING`` with its prompt's tokens once it has (it ran: a
        model call, booked with its prompt should the stream end before its usage), then
        keep-alives.

        NOTE: none while one step of the engine has run longer than the keep-alive interval:
        a comment says the engine makes progress. A hung engine's (its thread alive, its step
        stuck) kept the stream alive for ever, past any read timeout (a gateway in front's
        ``timeout.read``, a proxy's, the client's): its client waited with no end. A step
        shorter than the reader's timeout still never times it out."""
        if self._stuck_for() >= self._keepalive:
            return None
        if not self._watching:
            return _KEEPALIVE
        if self._job.started.is_set():
            self._watching = False
            return self._running()
        if not self._queued or now - self._queued_at >= self._keepalive:
            self._queued, self._queued_at = True, now
            return QUEUED
        return None

    def _running(self) -> bytes:
        """``RUNNING``: the prompt's tokens the engine runs, for the gateway in front."""
        return RUNNING + b"%d\n\n" % len(self._job.prompt_tokens)

    def counted(self) -> dict[str, Any]:
        """The prompt it ran (with the tokens its cached prefix held, once loaded), and a token
        for each text delta (a lower bound: a delta may hold more than one; the exact count is
        in the ``Finished`` event, which a stream closed early never reads). A request
        cancelled while it waited for the engine ran nothing: 0 (then the ledger books no model
        call, ``BackendStream.counted``)."""
        return _counted(self._job, self._deltas)

    async def _close(self, pending: asyncio.Task[Event] | None) -> None:
        """Cancel the generation; the engine stops it between two tokens.

        NOTE: a pending ``anext`` must be finished (cancelled and awaited) before the generator
        can be closed, or ``aclose`` fails with "asynchronous generator is already running".
        """
        self._job.cancel.set()  # first, so nothing below (awaits under cancellation) can skip it
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        with contextlib.suppress(RuntimeError):  # closed already, or still closing elsewhere
            await self._events.aclose()


def _keepalive_every(asked: float | None) -> float:
    """The seconds of silence before a stream's keep-alive comment (``asked``: the gateway in
    front's ``x-cachegate-keepalive``, None: none asked)."""
    return max(KEEPALIVE_MIN, min(_KEEPALIVE_EVERY, asked or _KEEPALIVE_EVERY))


def _counted(job: GenerationRequest, deltas: int) -> dict[str, Any]:
    """What ``job`` ran so far as a chat ``usage`` object (see ``LocalStream.counted``)."""
    prompt = len(job.prompt_tokens) if job.started.is_set() else 0
    cached = job.cached[-1] if prompt and job.cached else 0
    return {"prompt_tokens": prompt, "completion_tokens": deltas,
            "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup v2 quota (containers)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def _load_and_warm(config: EngineConfig) -> Engine:
    """Load the engine and run one tiny forward pass, so that the memory-mapped weights are
    paged in before /readyz says ready (not during the first user's request)."""
    import torch

    engine = Engine.load(config)
    with torch.inference_mode():
        device = next(engine.model.parameters()).device
        engine.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device))  # [1, 1]
    return engine


# ---------------------------------------------------------------------------------------------
# request → engine


#: Parameters the local model cannot honour, with the value that means "not used".
_UNSUPPORTED: dict[str, Any] = {
    "tools": None,
    "functions": None,
    "logprobs": False,  # chat: a boolean; completions: an int, where 0 asks for something
    "top_logprobs": 0,
    "logit_bias": None,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "echo": False,
    "suffix": None,
    "best_of": 1,
    # OpenAI chat fields for other models (reasoning, predicted outputs, web search, audio
    # voice): null (as some clients send every field they know) asks for nothing
    "reasoning_effort": None,
    "verbosity": None,
    "prediction": None,
    "web_search_options": None,
    "moderation": None,
}


#: Request fields the local model knows: those it honours, those that cannot change its
#: answer (user, metadata, ...), and those of _UNSUPPORTED (a 400 when used). Any other field
#: gets a 400, as OpenAI answers "Unrecognized request argument".
_KNOWN = frozenset({
    "model", "messages", "prompt", "stream", "stream_options", "temperature", "top_p", "top_k",
    "n", "stop", "max_tokens", "max_completion_tokens", "seed", "user", "metadata", "store",
    "service_tier", "parallel_tool_calls", "tool_choice", "function_call", "response_format",
    "modalities", "audio", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options",
    "safety_identifier", "continue_final_message", "add_generation_prompt", *_UNSUPPORTED,
})  # fmt: skip
#: Fields of one API that the other does not define: a 400 there, as any unknown field.
_ONLY = {
    "chat": frozenset({"prompt", "echo", "suffix", "best_of"}),
    "completion": frozenset({
        "messages", "max_completion_tokens", "parallel_tool_calls", "tool_choice",
        "function_call", "response_format", "modalities", "audio", "tools", "functions",
        "continue_final_message", "add_generation_prompt", "reasoning_effort", "verbosity",
        "prediction", "web_search_options", "moderation",
    }),
}  # fmt: skip


def _unsupported(param: str, what: str = "is not supported by the local model") -> APIError:
    return APIError(400, f"'{param}' {what}.", param=param, code="unsupported_parameter")


def _sampling(body: dict[str, Any], kind: str) -> SamplingParams:
    """The request's sampling parameters, or a 400 for a field the local model does not know
    in this API (``kind``), cannot honour, or a value of the wrong type."""
    for param in body:
        if param not in _KNOWN or param in _ONLY.get(kind, ()):
            raise _unsupported(param, "is not a request argument the local model recognizes")
    for param, unused in _UNSUPPORTED.items():
        value = body.get(param)
        used = value is not unused if isinstance(unused, bool) else value != unused
        if value is not None and used and value not in ([], {}, ""):
            raise _unsupported(param)
    for param in ("tool_choice", "function_call"):  # forcing a call the model cannot make
        if body.get(param) not in (None, "none", "auto"):
            raise _unsupported(param)
    modalities = body.get("modalities") or ()
    modalities = [modalities] if isinstance(modalities, str) else modalities
    if not isinstance(modalities, list | tuple):
        raise APIError(
            400, "'modalities' must be a list of strings.", param="modalities", code="invalid_value"
        )
    if body.get("audio") is not None or any(m != "text" for m in modalities):
        raise _unsupported("modalities", "other than text is not supported by the local model")
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type", "text") != "text":
        raise _unsupported("response_format", "other than text is not supported by the local model")
    stop = body.get("stop")
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    top_k = _top_k(body.get("top_k"))
    seed = body.get("seed")  # (chat and completions check it; the bridges' bodies not)
    if seed is not None and not _is_int(seed):
        raise APIError(400, "'seed' must be an integer.", param="seed", code="invalid_value")
    try:
        return SamplingParams(
            max_tokens=_max_tokens(body),
            temperature=None if temperature is None else float(temperature),
            top_p=None if top_p is None else float(top_p),
            top_k=top_k,
            seed=seed,
            stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
            n=int(body.get("n") or 1),
        )
    except SamplingError as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    except ValueError as exc:
        raise APIError(400, str(exc), code="invalid_value") from None


def _top_k(top_k: Any) -> int | None:
    """A request's ``top_k``: None (unset) is the model's default, like temperature; -1 is
    vLLM's and SGLang's "no limit", which their clients send (0 here). A float with an integral
    value (``3.0``) is that integer, as vLLM takes it (a cache hit is served for it too)."""
    if isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)
    if top_k == -1 and _is_int(top_k):
        return 0
    if top_k is not None and (not _is_int(top_k) or top_k < 0):
        raise APIError(400, "'top_k' must be a non-negative integer (0 or -1: no limit).",
                       param="top_k", code="invalid_value")  # fmt: skip
    return cast(int | None, top_k)


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens")
    value = body.get("max_tokens") if value is None else value
    return int(value) if value is not None else None


def _within_output_limit(max_tokens: int | None, limit: int | None, body: dict[str, Any]) -> None:
    """A 400 for a request that asks for more output tokens than the model gives one request
    (as vLLM and OpenAI answer a ``max_tokens`` past what the model can produce), ``param``
    the field it set (a bridged request's: renamed to the client's by ``_params_of``)."""
    if max_tokens is None or limit is None or max_tokens <= limit:
        return
    param = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    raise APIError(
        400,
        f"Too many output tokens asked for: {max_tokens}. This model produces at most {limit} "
        "tokens per request.",
        param=param,
        code="invalid_value",
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tokens(engine: Engine, request: GatewayRequest) -> list[int]:
    if request.kind == "chat":
        _check_messages(request.body["messages"])  # (a count's: a create's ran in check)
        return engine.encode_chat(request.body["messages"], continue_final=_continues(request))
    prompt = _prompt(request.body)
    return engine.encode_text(prompt) if isinstance(prompt, str) else list(prompt)


def _prompt(body: dict[str, Any]) -> str | list[int]:
    """A completions request's one prompt, text or token ids, or a 400 (``check`` runs it
    before the cache is looked in, ``_tokens`` before it encodes the prompt)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # one prompt in a list: ["text"] or [[token ids]]
    if isinstance(prompt, str) or (isinstance(prompt, list) and all(map(_is_int, prompt))):
        return prompt
    raise APIError(
        400,
        "The local model takes one prompt per request (a string or a list of token ids).",
        param="prompt",
        code="unsupported_parameter",
    )


def _check_messages(messages: list[dict[str, Any]]) -> None:
    """A 400 for the first chat message the local model cannot read: one carrying a tool call
    (the template would drop it), or ``_check_content``'s."""
    for i, message in enumerate(messages):
        for field in ("tool_calls", "function_call"):
            if message.get(field):
                raise _unsupported(f"messages[{i}].{field}")
        _check_content(message, i)


def _check_content(message: dict[str, Any], i: int) -> None:
    """A 400 for a turn with no content (null or ``[]``) but an assistant's: as OpenAI
    answers it. The template rendered an empty turn, and the model's answer to it was cached
    (an assistant's null content is the tool call it carried, refused above). A ``tool`` or
    ``function`` message too: it answers a call no earlier message may carry here (refused
    above), and OpenAI refuses one that answers none; the model answered it as a turn."""
    if message["role"] in ("tool", "function"):
        raise APIError(400, f"'messages[{i}]' with role '{message['role']}' must answer a tool "
                       "call of a preceding message.", param=f"messages[{i}].role",
                       code="invalid_value")  # fmt: skip
    if message["role"] != "assistant" and message.get("content") in (None, []):
        raise no_content(f"messages[{i}].content")


def _fitted(engine: Engine, request: GatewayRequest, max_tokens: int | None) -> list[int]:
    """The prompt's tokens; with ``request.truncate``, less its oldest messages (never a
    system or developer one, nor the last) while it and ``max_tokens`` (or one token)
    overflow the context window. What still overflows is refused by ``engine.prepare``."""
    tokens = _tokens(engine, request)
    if not request.truncate or engine.shift is not None:  # (sinks: nothing overflows)
        return tokens
    room = engine.context_window - (max_tokens or 1)
    messages = request.body["messages"]
    droppable = [i for i, m in enumerate(messages[:-1]) if m["role"] not in _KEPT]
    if len(tokens) <= room or not droppable:
        return tokens
    tried: dict[int, list[int]] = {}

    def without(n: int) -> list[int]:
        """The prompt less its ``n`` oldest messages that may be left out."""
        if n not in tried:
            gone = set(droppable[:n])
            kept = [m for i, m in enumerate(messages) if i not in gone]
            body = {**request.body, "messages": kept}
            tried[n] = _tokens(engine, dataclasses.replace(request, body=body))
        return tried[n]

    # NOTE: the fewest left out that fit (all there are if none do), found by halving, as a
    # prompt only gets shorter as more is left out: log2(n) encodings of the whole prompt,
    # not one per message left out (quadratic in a long conversation's items)
    low, high = 1, len(droppable)
    while low < high:
        middle = (low + high) // 2
        if len(without(middle)) <= room:
            high = middle
        else:
            low = middle + 1
    return without(low)


#: Messages ``truncate`` never leaves out.
_KEPT = ("system", "developer")


def _continues(request: GatewayRequest) -> bool:
    """Whether the prompt continues the final assistant message rather than open a new turn:
    a Messages prefill (the bridge says so), or vLLM's ``continue_final_message: true`` on a
    chat request (vLLM clients send ``add_generation_prompt: false`` with it; accepted, not
    needed). Chat's default stays OpenAI's: a final assistant message gets a new turn.
    """
    body = request.body
    continued = body.get("continue_final_message")
    continued = False if continued is None else continued  # null: unset, as for every field
    opened = body.get("add_generation_prompt")
    opened = not continued if opened is None else opened
    # NOTE: both (vLLM refuses it too), or neither (a closed turn and no new one), is a 400
    if not (isinstance(continued, bool) and isinstance(opened, bool)) or continued == opened:
        raise APIError(
            400,
            "Set exactly one of 'continue_final_message' and 'add_generation_prompt' to true.",
            param="continue_final_message",
            code="invalid_value",
        )
    return request.continue_final or continued


# ---------------------------------------------------------------------------------------------
# engine → OpenAI shapes


def _usage(completion: Completion) -> dict[str, Any]:
    u = completion.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _response(
    request: GatewayRequest, model: str, completion: Completion, created: int
) -> dict[str, Any]:
    rid, _ = fresh_identity(request.kind)
    choices: list[dict[str, Any]]
    if request.kind == "chat":
        choices = [
            {
                "index": c.index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": None,
                "finish_reason": c.finish_reason,
                **_stop_string(c.stop_string),
            }
            for c in completion.choices
        ]
        obj = "chat.completion"
    else:
        choices = [
            {
                "index": c.index,
                "text": c.text,
                "logprobs": None,
                "finish_reason": c.finish_reason,
                **_stop_string(c.stop_string),
            }
            for c in completion.choices
        ]
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": choices,
        "usage": _usage(completion),
    }


def _chunks(
    kind: str, head: dict[str, Any], event: Event, started: set[int]
) -> list[dict[str, Any]]:
    """The OpenAI chunks for one engine event (a chat choice opens with a role delta)."""
    if isinstance(event, Finished):
        # Always sent: the pipeline stores it with the answer and drops it for clients that
        # did not ask for usage.
        return [{**head, "choices": [], "usage": _usage(event.completion)}]
    index = event.index
    choices = []
    if kind == "chat" and index not in started:  # an empty answer still opens its message
        started.add(index)
        choices.append(_choice(kind, index, "", None, role=True))
    if isinstance(event, TextDelta):
        choices.append(_choice(kind, index, event.text, None))
    else:  # ChoiceFinished
        choice = _choice(kind, index, None, event.finish_reason)
        choices.append({**choice, **_stop_string(event.stop_string)})
    return [{**head, "choices": [choice]} for choice in choices]


def _stop_string(stop: str | None) -> dict[str, str]:
    """A choice's ``stop_reason``: the stop string that ended it, as vLLM reports it (only
    when one did; what tells a Messages client ``stop_sequence`` from ``end_turn``)."""
    return {"stop_reason": stop} if stop is not None else {}


def _choice(
    kind: str, index: int, text: str | None, finish: str | None, role: bool = False
) -> dict[str, Any]:
    if kind != "chat":
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
    delta: dict[str, Any] = {"content": text} if text is not None else {}
    if role:
        delta = {"role": "assistant", "content": ""}
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
