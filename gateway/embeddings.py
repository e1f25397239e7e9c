"""``POST /v1/embeddings``: forwarded to an OpenAI-compatible upstream, cached input by input.

A batch's inputs are looked up one by one (exact match: an embedding is a function of its
text, with no paraphrase to share); only the inputs not in the cache go upstream, in one
request, and the answer is put back together in the order asked. So a batch that repeats
inputs of earlier batches pays only for its new ones::

    cached: "a", "c"        request: ["a", "b", "c", "d"]   →   upstream: ["b", "d"]

``x-cache`` is ``exact`` when every input came from the cache (with ``x-cache-age``, of the
oldest) and ``miss`` when any went upstream; ``x-cache-inputs: 2/4`` says how many came from
the cache. ``usage`` counts the tokens the upstream was paid for, so inputs served from the
cache add none, and an input a batch repeats is asked for once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import msgspec

from semantic.cache import Lookup, ResponseCache
from semantic.keys import CacheKey, embedding_key, salted

from .backend import Backend
from .canonical import Answer, CacheState, GatewayRequest, Reply, Wire
from .errors import APIError, sse_error
from .ledger import usage_of
from .pipeline import Pipeline, Watch
from .requests import embedding_inputs, parse_request
from .tracing import tier

__all__ = ["EMBEDDINGS", "embed"]

log = logging.getLogger(__name__)

T = TypeVar("T")


#: Cache lookups of one request in flight at once (a batch holds up to 2,048).
_CONCURRENCY = 16
#: Fields whose null is the field left unset (as ``semantic.keys`` reads them): sent without.
_NULL_IS_UNSET = ("encoding_format", "dimensions")


class EmbeddingsWire:
    """``POST /v1/embeddings`` at the HTTP edge (its walk is :func:`embed`, not the pipeline's)."""

    kind: Literal["embedding"] = "embedding"

    def parse(self, raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
        return parse_request("embedding", raw, headers, tenant)

    def error_json(self, error: APIError) -> bytes:
        return error.json()

    def error_event(self, error: APIError, sequence: int = 0) -> bytes:
        return sse_error(error)


EMBEDDINGS: Wire = EmbeddingsWire()


async def embed(
    pipeline: Pipeline,
    request: GatewayRequest,
    auth: str | None = None,
    watch: Watch[Any] | None = None,
) -> Reply:
    """Answer an embeddings request: cached inputs from the cache, the others upstream."""
    backend, request = pipeline.route(request, auth)
    if "embedding" not in backend.apis:
        raise APIError(
            400,
            f"The model `{request.model}` does not serve embeddings.",
            param="model",
            code="unsupported_model",
        )
    inputs = embedding_inputs(request.body["input"])
    batch = await _look_up(pipeline, request, inputs, backend.cache_salt)
    missing = [i for i in range(len(inputs)) if i not in batch.found]
    usage: dict[str, Any] = {"prompt_tokens": 0, "total_tokens": 0}
    model = next(iter(batch.found.values()), {}).get("model") or request.model
    headers: dict[str, str] = {}
    if missing:
        answer = await _ask(backend, request, inputs, missing, batch, auth, watch)
        usage = answer.body.get("usage") or usage
        model, headers = answer.body.get("model") or request.model, dict(answer.headers)
    else:
        batch.state = "exact"
        headers["x-cache-age"] = str(int(batch.age))
    if batch.keys:
        headers["x-cache-inputs"] = f"{len(inputs) - len(missing)}/{len(inputs)}"
        if missing and not request.control.no_store:  # (the response does not wait for it)
            pipeline.store_many_soon(
                request, [(batch.keys[i], batch.found[i]) for i in batch.asked], batch.epoch
            )
    data = [
        {"object": "embedding", "index": i, "embedding": batch.found[i]["embedding"]}
        for i in range(len(inputs))
    ]
    answer_body = {"object": "list", "data": data, "model": model, "usage": usage}
    reply = Reply(batch.state, headers, body=answer_body)
    asked = set(batch.asked)  # (a repeated input went once: its repeats are saved too)
    cached = [batch.found[i] for i in range(len(inputs)) if i not in asked]
    if cached:  # what the inputs not sent cost when they were asked (the ledger's savings)
        tokens = sum(usage_of(e.get("usage")).input_tokens for e in cached)
        reply.avoided = {"prompt_tokens": tokens, "total_tokens": tokens}
    return reply


@dataclass(slots=True)
class _Batch:
    """An embeddings request's inputs as the cache knows them."""

    state: CacheState = "bypass"
    keys: list[CacheKey] = field(default_factory=list)  # one per input (none: no cache)
    found: dict[int, dict[str, Any]] = field(default_factory=dict)  # index -> embedding, model
    age: float = 0.0  # of the oldest input found
    asked: list[int] = field(default_factory=list)  # the inputs sent upstream
    epoch: int | None = None  # the cache's when the request began (a flush since: not stored)


async def _look_up(
    pipeline: Pipeline, request: GatewayRequest, inputs: list[str | list[int]], salt: str
) -> _Batch:
    cache, control = pipeline.cache, request.control
    batch = _Batch()
    if cache is None or not cache.exact or (control.no_cache and control.no_store):
        return batch
    ns = control.namespace
    batch.epoch = cache.epoch  # (before the lookup: the answers are made after it)
    # (salted: a name pointed at another upstream model gives other vectors)
    batch.keys = [
        salted(embedding_key(request.tenant, ns, request.model, request.body, x), salt)
        for x in inputs
    ]
    batch.state = "refresh" if control.no_cache else "miss"
    if not control.no_cache:
        await pipeline.written(batch.keys[0].scope)  # (one scope: see embedding_key)
        with tier("cache.lookup") as span:
            looked = await _bounded(cache.lookup(k, max_age=control.max_age) for k in batch.keys)
            for i, hit in enumerate(looked):
                if hit.entry is not None and await _servable(cache, request.model, hit):
                    batch.found[i] = hit.entry.response
                    batch.age = max(batch.age, hit.age or 0.0)
            if span is not None:  # (exact: every input found, as x-cache says)
                found = "exact" if len(batch.found) == len(inputs) else "miss"
                span.set_attribute("cachegate.cache", found)
    return batch


async def _servable(cache: ResponseCache, model: str, hit: Lookup) -> bool:
    """Whether an input's stored answer holds its vector, as every stored one did; one that
    does not (a damaged record) failed each request for that input with a 500 until its TTL
    ran out: it is dropped from the cache (see ``ResponseCache.drop_unreplayable``), and the
    input is asked upstream as a miss, its answer stored in the entry's place."""
    assert hit.entry is not None
    vector = hit.entry.response.get("embedding")
    if isinstance(vector, list | str) and vector:  # (as ``_vectors`` takes it)
        return True
    log.warning("model %s: cached embedding %d cannot be served back: dropped, answered as "
                "a miss", model, hit.entry.id)  # fmt: skip
    await cache.drop_unreplayable(hit.entry)
    return False


async def _ask(
    backend: Backend,
    request: GatewayRequest,
    inputs: list[str | list[int]],
    missing: list[int],
    batch: _Batch,
    auth: str | None,
    watch: Watch[Any] | None,
) -> Answer:
    """Send the missing inputs upstream, each distinct one once; fill them into ``batch``."""
    first: dict[int, int] = {}  # input index -> the index of its first occurrence
    seen: dict[bytes, int] = {}
    for i in missing:
        first[i] = seen.setdefault(_encode(inputs[i]), i)
    batch.asked = asked = list(seen.values())
    body = request.body
    # NOTE: null is the field left unset (the key's reading, and OpenAI's), but vLLM refuses
    # a null format: sent without them, a miss is answered as the hit it shares an entry with
    nulls = [k for k in _NULL_IS_UNSET if k in body and body[k] is None]
    if nulls:
        body = {k: v for k, v in body.items() if k not in nulls}
    if len(asked) < len(inputs):  # only what the cache lacks
        body = {**body, "input": [inputs[i] for i in asked]}
    try:
        with tier("model", **{"gen_ai.request.model": request.model}):
            pending = backend.complete(dataclasses.replace(request, body=body), auth)
            answer: Answer = await (watch(pending) if watch else pending)
    except APIError as exc:
        if len(asked) < len(inputs):  # its input[k] is the client's input[asked[k]]
            _renumber(exc, asked)
        raise
    base64 = body.get("encoding_format") == "base64"
    vectors = _vectors(request.model, answer.body, len(asked), base64)
    model = answer.body.get("model") or request.model
    spent = _split(usage_of(answer.body.get("usage")).input_tokens, [inputs[i] for i in asked])
    for i, vector, tokens in zip(asked, vectors, spent, strict=True):
        batch.found[i] = {"embedding": vector, "model": model, "usage": {"prompt_tokens": tokens}}
    for i in missing:
        batch.found[i] = batch.found[first[i]]
    return answer


def _split(tokens: int, inputs: list[str | list[int]]) -> list[int]:
    """``tokens`` (a batch's usage) shared among ``inputs`` in proportion to their lengths
    (characters or token ids): each input's own count where there is one input, an estimate
    otherwise; the shares add up to ``tokens``.

    NOTE: every input costs a token (an empty one is refused), so each gets one first when
    there are enough, and the rest by length beyond the first character: shared by length
    alone, "hi" beside "there" (2 tokens) was stored as 0, and its hits booked as saving none.
    """
    base = 1 if tokens >= len(inputs) else 0
    sizes = [max(len(x) - base, 0) for x in inputs]
    if not any(sizes):  # (one character each: equal shares)
        sizes = [1] * len(inputs)
    rest, total = tokens - base * len(inputs), sum(sizes)
    # (running totals rounded to the nearest, once: floored, the leftover went to the last
    # inputs whatever their length: 3 tokens for "alpha beta" and "gamma" were 1 and 2)
    reached = [(2 * rest * upto + total) // (2 * total) for upto in itertools.accumulate(sizes)]
    return [base + b - a for a, b in zip([0, *reached], reached, strict=False)]


async def _bounded(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Await ``calls`` with at most ``_CONCURRENCY`` in flight; results in order."""
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _renumber(exc: APIError, asked: list[int]) -> None:
    """Name the client's own input in an upstream error about the inputs it was sent."""

    def client_index(match: re.Match[str]) -> str:
        k = int(match.group(2))
        return f"{match.group(1)}{asked[k]}]" if k < len(asked) else match.group(0)

    exc.message = _INPUT_INDEX.sub(client_index, exc.message)
    if exc.param:
        exc.param = _INPUT_INDEX.sub(client_index, exc.param)


_INPUT_INDEX = re.compile(r"(input\[)(\d+)\]")
_encode = msgspec.json.Encoder(order="sorted").encode


def _vectors(model: str, response: dict[str, Any], expected: int, base64: bool) -> list[Any]:
    """The embeddings of an upstream answer in input order; 502 unless exactly one per input,
    each in the encoding asked for (``base64``: a string; else a list of numbers).

    NOTE: a string answered for floats (or numbers for base64) was stored and served as the
    client's embedding."""
    data = response.get("data")
    vectors: dict[int, Any] = {}
    wrong = 0
    if isinstance(data, list) and len(data) == expected:
        for item in data:
            if isinstance(item, dict) and isinstance(item.get("index"), int):
                vector = item.get("embedding")
                if _encoded(vector) if base64 else _floats(vector):
                    vectors.setdefault(item["index"], vector)
                else:
                    wrong += 1
    if wrong:
        encoding = "a base64 string" if base64 else "a list of numbers"
        raise APIError(
            502,
            f"Upstream for model '{model}' answered {wrong} of {expected} embeddings as other "
            f"than {encoding}.",
            code="upstream_error",
        )
    if sorted(vectors) != list(range(expected)):
        got = len(data) if isinstance(data, list) else 0
        raise APIError(
            502,
            f"Upstream for model '{model}' answered {got} embeddings for {expected} inputs, "
            "not one for each.",
            code="upstream_error",
        )
    return [vectors[i] for i in range(expected)]


def _encoded(vector: Any) -> bool:
    """A non-empty string (base64's)."""
    return isinstance(vector, str) and bool(vector)


def _floats(vector: Any) -> bool:
    """A non-empty list of numbers (not booleans)."""
    return (
        isinstance(vector, list)
        and bool(vector)
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector)
    )
