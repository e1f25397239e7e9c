"""``POST /v1/embeddings``: forwarded to an OpenAI-compatible upstream, cached input by input.

A batch's inputs are looked up one by one (exact match: an embedding is a function of its
text, with no paraphrase to share); only the inputs not in the cache go upstream, in one
request, and the answer is put back together in the order asked. So a batch that repeats
inputs of earlier batches pays only for its new ones::

    cached: "a", "c"        request: ["a", "b", "c", "d"]   →   upstream: ["b", "d"]

``x-cache`` is ``exact`` when every input came from the cache and ``miss`` when any went
upstream; ``x-cache-inputs: 2/4`` says how many came from the cache. ``usage`` counts the
tokens the upstream was paid for, so inputs served from the cache add none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from semantic.keys import CacheKey, embedding_key

from .backend import RELAYED_HEADERS, Backend
from .errors import APIError
from .requests import GatewayRequest, embedding_inputs

if TYPE_CHECKING:
    from .pipeline import CacheState, Pipeline, Reply, Watch

__all__ = ["embed"]

log = logging.getLogger(__name__)


async def embed(
    pipeline: Pipeline,
    request: GatewayRequest,
    backend: Backend,
    auth: str | None,
    watch: Watch[Any] | None,
) -> Reply:
    from .pipeline import Reply

    if not getattr(backend, "serves_embeddings", False):
        raise APIError(
            400,
            f"The model `{request.model}` does not serve embeddings.",
            param="model",
            code="unsupported_model",
        )
    cache, control = pipeline.cache, request.control
    inputs = embedding_inputs(request.body["input"])
    keys: list[CacheKey] = []
    found: dict[int, Any] = {}
    state: CacheState = "bypass"
    if cache is not None and cache.exact and not (control.no_cache and control.no_store):
        ns = control.namespace
        keys = [embedding_key(request.tenant, ns, request.model, request.body, x) for x in inputs]
        state = "refresh" if control.no_cache else "miss"
        if not control.no_cache:
            looked = await asyncio.gather(*(cache.lookup(k, max_age=control.max_age) for k in keys))
            found = {
                i: hit.entry.response["embedding"] for i, hit in enumerate(looked) if hit.entry
            }
    missing = [i for i in range(len(inputs)) if i not in found]
    usage: dict[str, Any] = {"prompt_tokens": 0, "total_tokens": 0}
    model = request.model
    headers: dict[str, str] = {}
    if missing:
        body = request.body
        if len(missing) < len(inputs):  # only what the cache lacks
            body = {**body, "input": [inputs[i] for i in missing]}
        token = RELAYED_HEADERS.set(headers)
        try:
            pending = backend.complete(dataclasses.replace(request, body=body), auth)
            response = await (watch(pending) if watch else pending)
        finally:
            RELAYED_HEADERS.reset(token)
        vectors = _vectors(request.model, response, len(missing))
        usage = response.get("usage") or usage
        model = response.get("model") or model
        for i, vector in zip(missing, vectors, strict=True):
            found[i] = vector
        if cache is not None and keys and not control.no_store:
            await _store(pipeline, request, [(keys[i], found[i]) for i in missing])
    else:
        state = "exact"
    data = [{"object": "embedding", "index": i, "embedding": found[i]} for i in range(len(inputs))]
    if keys:
        headers["x-cache-inputs"] = f"{len(inputs) - len(missing)}/{len(inputs)}"
    answer = {"object": "list", "data": data, "model": model, "usage": usage}
    return Reply(state, headers, body=answer)


def _vectors(model: str, response: dict[str, Any], expected: int) -> list[Any]:
    """The embeddings of an upstream answer in input order; 502 unless there is one per input."""
    data = response.get("data")
    vectors: dict[int, Any] = {}
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and isinstance(item.get("index"), int):
                vector = item.get("embedding")
                if isinstance(vector, list | str) and vector:
                    vectors[item["index"]] = vector
    if sorted(vectors) != list(range(expected)):
        raise APIError(
            502,
            f"Upstream for model '{model}' answered {len(vectors)} embeddings for "
            f"{expected} inputs.",
            code="upstream_error",
        )
    return [vectors[i] for i in range(expected)]


async def _store(
    pipeline: Pipeline, request: GatewayRequest, fresh: list[tuple[CacheKey, Any]]
) -> None:
    assert pipeline.cache is not None
    control = request.control
    try:
        for key, vector in fresh:
            await pipeline.cache.store(
                key,
                {"embedding": vector},
                model=request.model,
                tenant=request.tenant,
                namespace=control.namespace,
                ttl=control.ttl,
            )
    except Exception:  # the answer is good; a cache write failure must not lose it
        log.exception("storing embeddings failed")
