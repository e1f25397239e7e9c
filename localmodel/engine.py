"""The inference engine: prefix-cache match, prefill of the suffix, token-by-token decode.

One request, start to end (``Engine.generate``)::

    match  = tree.match(RadixKey(namespace, prompt))          # tier 2: longest cached prefix
    cache  = PagedCache(pool, prompt + max_tokens)            # a page table over the pool
    cache.map_prefix(match.spans, match.n_cached, prompt)     # the tree's pages, no copy
    n_cached += disk.load(key, cache, n_cached)               # optional: evicted KV, re-loaded
    logits = prefill(model, cache, prompt[n_cached:], start=n_cached)   # parallel, compute-bound
    loop:  token = sample(logits); logits = decode_one_token(model, cache, token, pos)  # serial
    tree.insert(RadixKey(namespace, prompt + generated), cache.view(...))  # shares the pages
    cache.release()                                           # the tree's references remain

The pool's pages hold KV in ``kv_dtype`` (int8 or half-precision pages are dequantised by
attention at every step, ``localmodel.pages``). With ``context_overflow: sinks`` a request's
page table holds at most a window; when it is full, a context shift (``localmodel.sinks``)
writes the kept tokens into fresh pages, and that request's KV is no prefix's any more.

The engine is synchronous and single-threaded by design (one request at a time, like a
batch of one); :class:`localmodel.worker.AsyncEngine` runs it on a dedicated thread for the
event loop. It knows nothing about HTTP: errors are exceptions, output is a stream of
:data:`Event` objects.

Example::

    engine = Engine.load(EngineConfig())
    tokens = engine.encode_chat([{"role": "user", "content": "Hi!"}])
    request = engine.prepare(tokens, SamplingParams(temperature=0), namespace="smollm2|tenant-a")
    result = engine.complete(request)            # or: for event in engine.generate(request)
    result.choices[0].text, result.usage.cached_tokens
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from localmodel import prompts
from localmodel.batch import Piece, use_batched_attention
from localmodel.batch import forward as batched_forward
from localmodel.config import EngineConfig
from localmodel.detok import CONTEXT_TOKENS, IncrementalDetokenizer, StopMatcher
from localmodel.disk import BreakEven, DiskPrefix
from localmodel.forward import decode_one_token, prefill
from localmodel.kv import KVLayout
from localmodel.kvquant import resolve_kv_dtype
from localmodel.loader import load, model_sampling_defaults
from localmodel.pages import PagedCache, PagedKV, PagePool, PoolExhausted, PoolStats
from localmodel.sampling import SamplingParams, make_generator, sample
from localmodel.sinks import ContextShift, KeptNotStored
from prefix import RadixCache, RadixKey, RadixStats
from prefix.offload import DiskStats, OnDisk
from prefix.radix import Evicted, KVSpan

__all__ = [
    "Choice",
    "ChoiceFinished",
    "Completion",
    "ContextWindowExceeded",
    "Engine",
    "EngineStats",
    "Event",
    "FinishReason",
    "Finished",
    "GenerationRequest",
    "InvalidRequestError",
    "PrefillCancelled",
    "Steps",
    "TextDelta",
    "Usage",
    "cancelled_events",
    "decode_one_token",
    "prefill",
]

logger = logging.getLogger(__name__)

FinishReason = Literal["stop", "length", "cancelled"]

#: The pool's size beyond ``prefix_cache_bytes`` when ``kv_pool_bytes`` is not set (or a
#: whole context window's KV, if more): what running requests get before cached prefixes
#: are reclaimed (SmolLM2 fp32: 256 MiB is ~5.8k tokens; its 8192-token window, 360 MiB).
DEFAULT_POOL_HEADROOM = 256 * 2**20

_STOP_TOKEN_NAMES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")


# ── errors (the gateway maps both to HTTP 400) ────────────────────────────────────────


class InvalidRequestError(ValueError):
    """The request cannot be served as given (empty prompt, bad token ids, …)."""


class ContextWindowExceeded(InvalidRequestError):
    """``prompt_tokens + max_tokens`` does not fit the model's context window."""

    def __init__(self, prompt_tokens: int, max_tokens: int, limit: int) -> None:
        self.prompt_tokens, self.max_tokens, self.limit = prompt_tokens, max_tokens, limit
        super().__init__(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} "
            "for the completion). Please reduce the prompt or the completion length."
        )


class PrefillCancelled(Exception):
    """Raised inside a request's coroutine when its driver answers a prompt's
    :class:`~localmodel.batch.Piece` with None (the prompt is not fed further): the request
    finishes ``"cancelled"`` at once, keeping the KV computed so far."""


# ── request and result types ──────────────────────────────────────────────────────────


@dataclass(frozen=True)
class GenerationRequest:
    """A validated request (built by :meth:`Engine.prepare`; ``params.max_tokens`` is set).

    ``namespace`` partitions the prefix cache (model + tenant salt, built by the caller):
    requests in different namespaces never share KV. ``cancel`` stops generation between
    two tokens (client disconnect); the KV computed so far is still cached. ``started`` is
    set once the engine takes the request up (a scheduler admitted it): one cancelled
    before that never ran (it is not billed its prompt).
    """

    prompt_tokens: tuple[int, ...]
    namespace: str
    params: SamplingParams
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    started: threading.Event = field(default_factory=threading.Event, compare=False)
    #: The prompt tokens whose KV was reused (``Usage.cached_tokens``), filled in once its
    #: cached prefix is loaded, before its first event: what a stream reports at its start.
    cached: list[int] = field(default_factory=list, compare=False)

    @property
    def max_tokens(self) -> int:
        assert self.params.max_tokens is not None  # NOTE: prepare() always resolves it
        return self.params.max_tokens


@dataclass(frozen=True)
class Usage:
    """OpenAI usage; ``cached_tokens`` = prompt tokens whose KV was reused, not recomputed.

    That is the memory tree's tokens plus those re-loaded from the disk tier.
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    token_ids: tuple[int, ...]  # sampled tokens, a final stop token (eos) included
    finish_reason: FinishReason
    #: The stop string that ended it (as vLLM reports it); None: eos, length or cancelled.
    stop_string: str | None = None


@dataclass(frozen=True)
class Completion:
    choices: tuple[Choice, ...]
    usage: Usage
    prefill_s: float  # match + cache load + prefill + first sample: the engine's TTFT
    decode_s: float  # first sampled token → last one (prefix-tree inserts excluded)


@dataclass(frozen=True)
class TextDelta:
    """New text of choice ``index`` (never splits a character, never shows a stop string)."""

    index: int
    text: str


@dataclass(frozen=True)
class ChoiceFinished:
    index: int
    finish_reason: FinishReason
    stop_string: str | None = None  # see Choice


@dataclass(frozen=True)
class Finished:
    """Always the last event of a request."""

    completion: Completion


Event = TextDelta | ChoiceFinished | Finished

#: A request as a coroutine (:meth:`Engine.steps`): yields events and pieces, receives logits.
Steps = Generator[Event | Piece, torch.Tensor | None, None]


@dataclass(frozen=True)
class EngineStats:
    """The prefix tiers of an engine: memory tree, and the disk tier when it is on.

    ``disk_hit_tokens`` counts prompt tokens loaded from disk into requests (also part of
    their ``cached_tokens``); ``break_even`` holds the measured figures that decide when.
    """

    prefix: RadixStats
    disk: DiskStats | None
    disk_hit_tokens: int
    break_even: BreakEven | None
    pool: PoolStats  # the paged KV pool every request and the tree's spans live in


def cancelled_events(usage: Usage, prefill_s: float = 0.0) -> tuple[ChoiceFinished, Finished]:
    """The last events of a request cancelled before it generated a token: its one choice
    ends ``"cancelled"``, empty. A request cancelled before it ran at all ends with these too
    (``usage`` all 0: nothing ran, nothing to bill), so that a caller still reading its
    stream is answered."""
    choice = Choice(0, "", (), "cancelled")
    return ChoiceFinished(0, "cancelled"), Finished(Completion((choice,), usage, prefill_s, 0.0))


# ── the engine ────────────────────────────────────────────────────────────────────────


class Engine:
    """A loaded causal LM plus its prefix KV cache; serves one request at a time.

    NOTE: not thread-safe. Call ``generate``/``complete`` from one thread (``AsyncEngine``
    does); ``encode_*`` and ``prepare`` may run on any thread.

    With ``config.prefix_disk_dir`` the engine also starts a disk tier for what the memory
    tree evicts and measures its break-even (about a second on a CPU) unless ``break_even``
    is given; ``close`` stops it. It then builds the memory tree itself, wired to the tier,
    so ``prefix_cache`` cannot be passed too.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: EngineConfig | None = None,
        *,
        prefix_cache: RadixCache | None = None,
        break_even: BreakEven | None = None,
    ) -> None:
        self.config = config = config or EngineConfig()
        self.model = model.eval()
        use_batched_attention(model)  # NOTE: plain sdpa unless a forward passes batch=
        self.tokenizer = tokenizer
        self.layout = KVLayout.of(model)
        #: the dtype KV is kept in (pool pages, disk rows; with sinks, the tree's copies)
        self.kv_dtype = resolve_kv_dtype(config.kv_dtype, self.layout.dtype)
        self.disk: DiskPrefix | None = None
        if config.prefix_disk_dir is not None:
            if prefix_cache is not None:
                raise ValueError("Engine: prefix_cache cannot be given with prefix_disk_dir")
            try:
                self.disk = DiskPrefix.open(
                    config.prefix_disk_dir,
                    config.prefix_disk_bytes,
                    model,
                    self.layout,
                    ttl_s=config.prefix_ttl_s,  # NOTE: a TTL bounds a prefix's life on disk too
                    break_even=break_even,
                    kv_dtype=self.kv_dtype,
                )
            except OSError as exc:  # a full, read-only or missing disk: the tier is optional
                logger.error(
                    "prefix disk tier in %s is off (the model serves without it): %s",
                    config.prefix_disk_dir,
                    exc,
                )
        model_limit = int(model.config.get_text_config(decoder=True).max_position_embeddings)
        self.context_window = min(self.config.max_context or model_limit, model_limit)
        if (self.config.max_context or 0) > model_limit:
            logger.warning(
                "localmodel: max_context %d is past the model's own window: capped at %d",
                self.config.max_context,
                model_limit,
            )
        #: the paged KV pool, pages in kv_dtype: every request's KV and the prefix tree's
        self.pool = self._make_pool(config)
        on_evict = self._on_evict if self.disk is not None else None
        self.prefix_cache = prefix_cache or RadixCache(
            config.prefix_cache_bytes, ttl_s=config.prefix_ttl_s, on_evict=on_evict
        )
        if self.pool.n_pages * self.pool.page_size < self.context_window:
            # NOTE: a request must fit the pool alone; prepare() refuses longer ones (400)
            self.context_window = self.pool.n_pages * self.pool.page_size
            logger.warning(
                "localmodel: kv_pool_bytes holds %d tokens: the context window is capped there",
                self.context_window,
            )
        #: context_overflow: sinks — how a request past the window keeps going (else None)
        self.shift = (
            ContextShift.of(model, config.sink_tokens)
            if config.context_overflow == "sinks"
            else None
        )
        if self.shift is not None and config.sink_tokens >= self.context_window // 2:
            raise ValueError(
                f"localmodel: sink_tokens ({config.sink_tokens}) must be below half the "
                f"context window ({self.context_window} tokens)"
            )
        self.stop_token_ids = _stop_token_ids(model, tokenizer)
        #: what requests that set no temperature/top_p/top_k get: YAML over the model's own
        self.sampling_defaults = model_sampling_defaults(model).merged(
            config.default_temperature, config.default_top_p, config.default_top_k
        )
        # The detokenizer runs on the worker thread while encode_* may run on the event
        # loop; a private copy keeps the Rust tokenizer from ever being borrowed twice.
        self._decoder_tokenizer = _clone_tokenizer(tokenizer)
        # NOTE: encoding a message that types a control token's text sets the tokenizer's own
        # split_special_tokens for that call (localmodel.prompts): requests encoded at once
        # on several threads would each be encoded under the other's setting
        self._encode_lock = threading.Lock()

    @classmethod
    def load(cls, config: EngineConfig) -> Engine:
        """Load ``config.source`` (converting the bundled GGUF on first use) and wrap it."""
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        loaded = load(config)
        return cls(loaded.model, loaded.tokenizer, config)

    def close(self) -> None:
        """Stop the disk tier (if any) and remove its files; the memory tree stays usable."""
        if self.disk is not None:
            self.disk.close()

    @property
    def stats(self) -> EngineStats:
        disk = self.disk
        return EngineStats(
            prefix=self.prefix_cache.stats,
            disk=disk.stats if disk is not None else None,
            disk_hit_tokens=disk.hit_tokens if disk is not None else 0,
            break_even=disk.break_even if disk is not None else None,
            pool=self.pool.stats,
        )

    def flush_prefix_cache(self) -> int:
        """Drop every unlocked cached prefix, in memory and on disk; return the bytes freed."""
        freed = self.prefix_cache.flush()  # NOTE: a flush is not offloaded (no on_evict)
        return freed + (self.disk.tier.flush() if self.disk is not None else 0)

    # ── prompts ───────────────────────────────────────────────────────────────────────

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> list[int]:
        """Chat messages → prompt token ids (template + generation prompt; or, with
        ``continue_final``, the final assistant message left open to be continued)."""
        with self._encode_lock:
            return prompts.encode_chat(
                self.tokenizer, messages, tools=tools, continue_final=continue_final
            )

    def encode_text(self, text: str) -> list[int]:
        """Legacy-completions prompt text → token ids."""
        with self._encode_lock:
            return prompts.encode_text(self.tokenizer, text)

    def prepare(
        self,
        prompt_tokens: Sequence[int],
        params: SamplingParams | None = None,
        *,
        namespace: str,
        cancel: threading.Event | None = None,
    ) -> GenerationRequest:
        """Validate a request and resolve its ``max_tokens``; cheap, call it before streaming.

        Raises :class:`ContextWindowExceeded` when prompt + ``max_tokens`` does not fit (or
        when not even one token fits); without ``max_tokens`` the completion may use what
        fits, capped by ``config.default_max_tokens``. With ``context_overflow: sinks``
        nothing is too long (the window slides, see ``localmodel.sinks``) and an unset
        ``max_tokens`` is ``default_max_tokens``. Unset ``temperature``/``top_p``/``top_k``
        become ``sampling_defaults``.
        """
        params = (params or SamplingParams()).with_defaults(self.sampling_defaults)
        n_prompt, limit = len(prompt_tokens), self.context_window
        if n_prompt == 0:
            raise InvalidRequestError("the prompt is empty")
        vocab = self.model.config.get_text_config(decoder=True).vocab_size
        if any(not 0 <= t < vocab for t in prompt_tokens):
            raise InvalidRequestError(f"prompt token ids must be in 0..{vocab - 1}")
        max_tokens = params.max_tokens
        sinks = self.shift is not None
        if max_tokens is None:
            max_tokens = self.config.default_max_tokens
            if not sinks:
                max_tokens = min(max_tokens, limit - n_prompt)
                if max_tokens < 1:
                    raise ContextWindowExceeded(n_prompt, 1, limit)
        elif n_prompt + max_tokens > limit and not sinks:
            raise ContextWindowExceeded(n_prompt, max_tokens, limit)
        if n_prompt + max_tokens > limit and params.n > 1:
            # NOTE: choices restart from the prompt's KV, which a shift would have overwritten
            raise InvalidRequestError(
                f"n > 1 needs prompt + max_tokens within the context window ({limit} tokens)"
            )
        return GenerationRequest(
            prompt_tokens=tuple(int(t) for t in prompt_tokens),
            namespace=namespace,
            params=replace(params, max_tokens=max_tokens),
            cancel=cancel or threading.Event(),
        )

    # ── generation ────────────────────────────────────────────────────────────────────

    def complete(self, request: GenerationRequest) -> Completion:
        """Run ``request`` to the end and return the result (no streaming)."""
        for event in self.generate(request):
            if isinstance(event, Finished):
                return event.completion
        raise AssertionError("generate() ended without a Finished event")

    def generate(self, request: GenerationRequest) -> Iterator[Event]:
        """Stream a request: ``TextDelta``s and one ``ChoiceFinished`` per choice, then ``Finished``.

        The request alone, one forward pass per :class:`~localmodel.batch.Piece` that
        :meth:`steps` asks for (``localmodel.scheduler`` runs many requests' steps batched).
        """
        steps = self.steps(request)
        reply: torch.Tensor | None = None
        try:
            while True:
                try:
                    item = steps.send(reply)
                except StopIteration:
                    return
                if isinstance(item, Piece):
                    reply = self._forward_alone(item)
                else:
                    reply = None
                    yield item
        finally:
            steps.close()

    def steps(self, request: GenerationRequest) -> Steps:
        """The request as a coroutine: it yields events, and a ``Piece`` when it needs logits.

        Whoever drives it sends back, for each ``Piece``, the last logits (``[vocab]``) of
        feeding the piece's tokens into its cache, and ``None`` after each event. ``None``
        for a ``Piece`` means it was not fed: the request was cancelled (a scheduler that
        stops a prompt part-way, or a preempted request whose client left before it was fed
        again) and it finishes ``"cancelled"`` with the tokens it has. Tier-2 work
        (match, load, disk, insert) happens inside, on the driver's thread.

        ``n > 1`` choices share one prefill: each choice starts from the same last-prompt
        logits, and the request cache is truncated back to the prompt between choices (a
        length reset, no copy; a paged cache then copies the prompt's last page, which the
        tree shares, before writing into it). Each choice's tokens are
        inserted into the prefix tree, where they share the prompt's nodes.
        """
        started = time.perf_counter()
        request.started.set()
        prompt = request.prompt_tokens
        # NOTE: only with context_overflow: sinks can a request be longer than the window;
        # its cache then holds a window, and shifts (localmodel.sinks) when full.
        capacity = min(len(prompt) + request.max_tokens, self.context_window)
        cache = PagedCache(self.pool, capacity, request.namespace)
        try:
            yield from self._serve(request, cache, started)
        finally:
            cache.release()  # NOTE: also when the driver closes the coroutine (a failure)

    def _serve(self, request: GenerationRequest, cache: PagedCache, started: float) -> Steps:
        """The body of :meth:`steps` on the request's cache."""
        prompt = request.prompt_tokens
        n_cached = self._load_prefix(request, cache)
        request.cached[:] = [n_cached]
        try:
            prompt_logits = yield from self._prefill(request, cache, n_cached)
        except PrefillCancelled:
            yield from self._cancelled_in_prefill(request, cache, n_cached, started)
            return
        n_prompt_kv = cache.length  # the prompt's KV: len(prompt) unless the window slid
        if n_prompt_kv > n_cached:
            # NOTE: now, not only when it finishes: a request that comes while this one
            # decodes (a system prompt they share) maps the prompt's pages instead of
            # prefilling it again
            self._insert(request.namespace, prompt, cache)
        generator = make_generator(request.params.seed, self.layout.device)
        choices: list[Choice] = []
        first_token_at = insert_s = 0.0
        for index in range(request.params.n):
            if index and request.cancel.is_set():
                break
            cache.truncate(n_prompt_kv)
            choice, sampled_at = yield from self._decode_choice(
                request, index, cache, prompt_logits, generator
            )
            first_token_at = first_token_at or sampled_at
            choices.append(choice)
            insert_started = time.perf_counter()
            self._insert(request.namespace, prompt + choice.token_ids, cache)
            insert_s += time.perf_counter() - insert_started
        finished_at = time.perf_counter()
        first = first_token_at or finished_at
        usage = Usage(
            prompt_tokens=len(prompt),
            completion_tokens=sum(len(c.token_ids) for c in choices),
            cached_tokens=n_cached,
        )
        decode_s = finished_at - first - insert_s
        yield Finished(Completion(tuple(choices), usage, first - started, decode_s))

    def _load_prefix(self, request: GenerationRequest, cache: PagedCache) -> int:
        """Fill ``cache`` with the longest cached prefix of the prompt (tree, then disk);
        return its length."""
        prompt = request.prompt_tokens
        key = RadixKey(request.namespace, prompt)
        match = self.prefix_cache.match(key)
        n_cached = min(match.n_cached, cache.capacity)
        cache.map_prefix(match.spans, n_cached, prompt)  # shared pages: no lock, no copy
        del match  # NOTE: its spans hold pages of the tree's path: not for the whole request
        if self.disk is not None and n_cached < min(len(prompt) - 1, cache.capacity):
            try:
                n_cached += self.disk.load(key, cache, n_cached)  # memory's prefix, continued
            except PoolExhausted:  # no page for it now: recomputing it is as right
                logger.info("localmodel: no KV pages free for a disk hit; prefilling instead")
            cache.tokens = list(prompt[:n_cached])
        return n_cached

    def preempt(self, cache: PagedCache) -> None:
        """Take a running request's pages back (the scheduler re-feeds its tokens later).

        Its KV goes to the prefix tree first: while the pool does not need those pages the
        request gets them back with no recompute (:meth:`restore`), and when it does they
        are reclaimed like any cached prefix, least recently used first.
        """
        self._insert(cache.namespace, tuple(cache.tokens), cache)
        cache.release()
        self.pool.preemptions += 1

    def restore(self, cache: PagedCache, tokens: Sequence[int]) -> int:
        """Map what the prefix tree still holds of a preempted request's ``tokens`` back
        into its (empty) cache; return how many (the rest must be fed again)."""
        match = self.prefix_cache.match(RadixKey(cache.namespace, tokens), count=False)
        n = min(match.n_cached, cache.capacity)
        cache.map_prefix(match.spans, n, tokens)
        return n

    def _cancelled_in_prefill(
        self, request: GenerationRequest, cache: PagedCache, n_cached: int, started: float
    ) -> Iterator[Event]:
        """Finish a request cancelled part-way through its prompt: the KV computed so far
        goes to the prefix tree (a client that retries starts from there), then the events."""
        self._insert(request.namespace, request.prompt_tokens, cache)  # (its first cache.length)
        usage = Usage(
            prompt_tokens=len(request.prompt_tokens), completion_tokens=0, cached_tokens=n_cached
        )
        yield from cancelled_events(usage, time.perf_counter() - started)

    def forward_batch(self, pieces: Sequence[Piece]) -> torch.Tensor:
        """Feed many requests' pieces in one forward pass; their last logits ``[n, vocab]``."""
        return batched_forward(self.model, pieces)

    # ── helpers ───────────────────────────────────────────────────────────────────────

    def _forward_alone(self, piece: Piece) -> torch.Tensor:
        """One request's piece on its own: a prefill, or one decode step (sdpa, no batching)."""
        cache, tokens = piece.cache, piece.tokens
        assert isinstance(cache, PagedCache)
        while True:  # NOTE: alone, the whole pool is there to reclaim
            try:
                cache.reserve(len(tokens))
                break
            except PoolExhausted:
                if not self.reclaim_held([cache]):
                    raise
        if len(tokens) == 1:
            logits = decode_one_token(self.model, cache, tokens[0], cache.length)
        else:
            ids = torch.tensor([tokens], device=self.layout.device)  # [1, n]
            logits = prefill(self.model, cache, ids, start=cache.length)
        cache.note_fed(tokens)
        return logits

    def _make_pool(self, config: EngineConfig) -> PagePool:
        """The paged pool in ``kv_dtype``."""
        n_bytes = config.kv_pool_bytes
        page = PagePool.bytes_per_page(self.layout, config.page_size, self.kv_dtype)
        window = -(-self.context_window // config.page_size) * page
        if n_bytes is None:  # NOTE: never less than one request of a whole context window
            n_bytes = config.prefix_cache_bytes + max(DEFAULT_POOL_HEADROOM, window)
        elif n_bytes < page:
            # NOTE: the pool had one page anyway (more than the budget), the context window
            # was capped at page_size tokens, and every longer prompt was a 400: ready, useless
            raise ValueError(
                f"localmodel: kv_pool_bytes ({n_bytes:,}) is less than one page of this model's "
                f"KV ({page:,} bytes: page_size {config.page_size} tokens, kv_dtype "
                f"{config.kv_dtype}); a context window of {self.context_window:,} tokens takes "
                f"{window:,} bytes"
            )
        pool = PagePool.of_bytes(self.layout, n_bytes, config.page_size, self.kv_dtype)
        reclaim = weakref.WeakMethod(self._reclaim)  # NOTE: the pool must not keep the engine

        def call_reclaim(n_pages: int) -> None:
            method = reclaim()
            if method is not None:
                method(n_pages)

        pool.reclaim = call_reclaim
        unshare = weakref.WeakMethod(self._unshare)

        def call_unshare(page: int) -> None:
            method = unshare()
            if method is not None:
                method(page)

        pool.unshare = call_unshare
        return pool

    def _reclaim(self, n_pages: int) -> None:
        """Evict cached prefixes (least recently used leaves first) until ``n_pages`` more
        pages are free, or nothing more can go. What of a node is on pages in running
        requests' tables stays (evicting it would free no page, only lose the prefix: e.g. a
        system prompt the running requests share): only the node's tail goes, or nothing of
        it; the pages a running request shares with an evicted span stay in use, hence the
        loop."""
        pool = self.pool
        target = pool.free_pages + n_pages
        while pool.free_pages < target:
            wanted = (target - pool.free_pages) * pool.page_bytes
            if not self.prefix_cache.evict(wanted, keep=_in_use):
                return

    def reclaim_held(self, caches: Sequence[PagedCache] = ()) -> bool:
        """Free one more page by evicting cached prefixes on running requests' pages too
        (``caches``: theirs); return whether one is. The last resort of requests short of
        pages (``_reclaim`` keeps what is on running pages): a node whose partly filled page a
        request replaced with a copy (a later node's, mapped over it) is kept by that later
        node, on the request's pages, with the page.

        Only what is in the way goes: on each request's path in the tree, the nodes below the
        first one holding a page no request holds (their KV stays on the request's pages) and
        that node's tail; a prefix other requests run on stays findable. Failing that, the
        least recently used nodes, wherever they are. NOTE: one more, not one: a caller short
        of several calls it again."""
        pool, tree = self.pool, self.prefix_cache
        target = pool.free_pages + 1
        while pool.free_pages < target:
            keep = self._in_the_way(caches)
            if not tree.evict(pool.page_bytes, keep=keep) and not tree.evict(pool.page_bytes):
                return False
        return True

    def _in_the_way(self, caches: Sequence[PagedCache]) -> Callable[[KVSpan], int]:
        """``keep`` for ``reclaim_held``: nothing of the nodes that keep a node with a page no
        running request holds in the tree (those below it on a request's path); of every
        other node, what is on running requests' pages (as ``_reclaim``)."""
        below: set[int] = set()  # NOTE: ids, not spans: holding one would keep its pages
        for cache in caches:
            if cache.dropped or not cache.tokens:  # (a slid window is no path of the tree)
                continue
            key = RadixKey(cache.namespace, cache.tokens)
            spans = self.prefix_cache.match(key, count=False).spans
            first = next((i for i, span in enumerate(spans) if _in_use(span) < len(span)), None)
            if first is not None:
                below.update(id(span) for span in spans[first + 1 :])

        def keep(span: KVSpan) -> int:
            return 0 if id(span) in below else _in_use(span)

        return keep

    def _unshare(self, page: int) -> None:
        """Evict the prefix tree's tokens on ``page``, a running request's partly filled page
        that it is to write into, when no page is free for its copy (after ``_reclaim``):
        the request then writes into the page itself. The tree keeps the tokens before it
        (and loses those after it, whose node hangs from it: a choice of ``n > 1``)."""
        pool = self.pool

        def keep(span: KVSpan) -> int:
            return span.in_use(but=page) if isinstance(span, PagedKV) else 0

        while pool.refs(page) > 1 and not pool.free_pages:
            if not self.prefix_cache.evict(pool.page_bytes, keep=keep):
                return

    def _on_evict(self, record: Evicted) -> None:
        """Hand an evicted node to the disk tier, its KV copied out of the pool first (as
        stored: int8 with its scales, no re-rounding), so that its pages are free now rather
        than once the writer thread is done.

        NOTE: its ancestors' spans too: the tier writes the prefix it lacks along with the
        node, and a span left pointing at pages would keep them in use after the ancestor
        leaves the tree (evicted in the same reclaim: pages the reclaim counted on). What
        the files already hold goes as its length only (``OnDisk``), not copied.
        """
        assert self.disk is not None
        tier = self.disk.tier
        held = tier.held(record.namespace, record.tokens[: record.start]) if record.start else 0
        prefix: list[KVSpan] = []
        pos = 0
        for span in record.prefix_spans:
            if pos + len(span) <= held:
                span = OnDisk(len(span))
            elif isinstance(span, PagedKV):
                span = span.stored()
            prefix.append(span)
            pos += len(span)
        span = record.span.stored() if isinstance(record.span, PagedKV) else record.span
        tier.offer(replace(record, span=span, prefix_spans=tuple(prefix)))

    def _prefill(
        self, request: GenerationRequest, cache: PagedCache, n_cached: int
    ) -> Generator[Piece, torch.Tensor | None, torch.Tensor]:
        """Feed the prompt from ``n_cached`` on; return its last logits.

        One piece, unless the prompt overflows the window (``context_overflow: sinks``):
        then a piece per window-full, with a context shift in between; the first window of
        the prompt goes to the prefix tree before the first shift overwrites it, so the
        next turn of the conversation prefills from there.
        """
        prompt = request.prompt_tokens
        logits, fed = None, n_cached
        while fed < len(prompt):
            redo: tuple[int, ...] = ()
            if cache.length == cache.capacity:
                if not cache.dropped:
                    self._insert(request.namespace, prompt[:fed], cache)
                redo = self._shift(cache)  # NOTE: without sinks the prompt always fits
            room = cache.capacity - cache.length - len(redo)
            logits = yield Piece(cache, redo + tuple(prompt[fed : fed + room]))
            if logits is None:  # not fed: cancelled
                raise PrefillCancelled
            fed += room
        assert logits is not None  # NOTE: a prompt always has a token to feed
        return logits

    def _decode_choice(
        self,
        request: GenerationRequest,
        index: int,
        cache: PagedCache,
        logits: torch.Tensor,
        generator: torch.Generator,
    ) -> Generator[Event | Piece, torch.Tensor | None, tuple[Choice, float]]:
        """Sample up to ``max_tokens`` tokens of one choice, streaming its text."""
        prompt, params = request.prompt_tokens, request.params
        detok = IncrementalDetokenizer(self._decoder_tokenizer, prompt[-CONTEXT_TOKENS:])
        stops = StopMatcher(params.stop)
        tokens: list[int] = []
        parts: list[str] = []
        finish: FinishReason = "length"
        first_token_at = 0.0
        while len(tokens) < request.max_tokens:
            if request.cancel.is_set():
                finish = "cancelled"
                break
            token = sample(logits, params, generator)
            tokens.append(token)
            first_token_at = first_token_at or time.perf_counter()
            if token in self.stop_token_ids:
                finish = "stop"
                break
            text, stopped = stops.push(detok.push(token))
            if text:
                parts.append(text)
                yield TextDelta(index, text)
            if stopped:
                finish = "stop"
                break
            if len(tokens) < request.max_tokens:  # no logits needed after the last token
                redo: tuple[int, ...] = ()
                if cache.length == cache.capacity:  # NOTE: without sinks max_tokens fits
                    redo = self._shift(cache)
                reply = yield Piece(cache, (*redo, token))  # at position cache.length
                if reply is None:  # not fed: cancelled
                    finish = "cancelled"
                    break
                logits = reply
        if not stops.stopped:
            text, stopped = stops.push(detok.flush())
            text += stops.flush()
            finish = "stop" if stopped else finish
            if text:
                parts.append(text)
                yield TextDelta(index, text)
        yield ChoiceFinished(index, finish, stops.matched)
        choice = Choice(index, "".join(parts), tuple(tokens), finish, stops.matched)
        return choice, first_token_at

    def _shift(self, cache: PagedCache) -> tuple[int, ...]:
        """Shift a full window (``context_overflow: sinks``); return the tokens to feed again
        ahead of the next ones: none, unless the pool had no page for the kept KV. They are
        then recomputed in the next piece, whose pages the scheduler reserves like any
        piece's, preempting the youngest request if it must (rather than failing this one)."""
        assert self.shift is not None
        try:
            self.shift.shift(cache)
        except KeptNotStored as exc:
            logger.info("localmodel: %s; recomputing them", exc)
            return tuple(exc.tokens)
        return ()

    @torch.inference_mode()
    def _insert(self, namespace: str, tokens: tuple[int, ...], cache: PagedCache) -> None:
        """Offer every token whose KV is in ``cache`` to the prefix tree.

        NOTE: the last sampled token (and a final eos) was never fed to the model, so the
        cache covers ``tokens[:cache.length]`` only; the tree copies the part it lacks.
        A cache whose window slid (``cache.dropped``) holds no token prefix: nothing is kept.
        """
        n = cache.length
        if cache.dropped or n == 0:  # (0: a preempted request cancelled before it was re-fed)
            return
        view = cache.view(n)  # shares the pages, no copy
        try:
            self.prefix_cache.insert(RadixKey(namespace, tokens[:n]), view)
        except (RuntimeError, MemoryError) as exc:  # e.g. torch.OutOfMemoryError in the copy
            # The answer is complete and right; only its reuse is lost (the tree stays whole).
            logger.warning("prefix cache: could not keep %d tokens of KV: %s", n, exc)


def _in_use(span: KVSpan) -> int:
    """The leading tokens of a tree span on pages running requests hold (``_reclaim`` keeps
    them: evicting them would free no page)."""
    return span.in_use() if isinstance(span, PagedKV) else 0


def _stop_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """EOS ids from the generation config and tokenizer, plus end-of-turn specials."""
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update([eos] if isinstance(eos, int) else list(eos or []))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    specials = set(tokenizer.all_special_tokens)
    ids.update(
        int(tokenizer.convert_tokens_to_ids(name)) for name in _STOP_TOKEN_NAMES if name in specials
    )
    return frozenset(ids)


def _clone_tokenizer(tokenizer: Any) -> Any:
    import copy

    try:
        return copy.deepcopy(tokenizer)
    except Exception:  # an exotic tokenizer: share it (decode-only use is read-mostly)
        logger.warning("localmodel: tokenizer cannot be copied; sharing it across threads")
        return tokenizer
