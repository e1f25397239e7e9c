"""Request parsing and validation: raw HTTP body + headers → ``GatewayRequest``.

Only the fields cachegate reasons about are type-checked; every other field is kept as sent and
forwarded upstream untouched (it still takes part in the cache scope, see semantic.keys).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from .canonical import CacheControl, GatewayRequest, Kind
from .config import MAX_TTL
from .errors import NO_RETRY, APIError

__all__ = [
    "ACCOUNT_HEADERS",
    "HOPS_HEADER",
    "IF_READY_HEADER",
    "KEEPALIVE_HEADER",
    "KEEPALIVE_MIN",
    "MAX_EMBEDDING_INPUTS",
    "MAX_HOPS",
    "PARTITION_HEADER",
    "CacheControl",
    "GatewayRequest",
    "decode_body",
    "embedding_inputs",
    "gateway_request",
    "integral",
    "parse_cache_control",
    "parse_request",
    "partitioned",
    "request_tenant",
    "tenant_partition",
    "validated",
]

#: How many cachegate gateways a request has already passed through; each upstream call sends
#: one more. A gateway whose upstream leads back to itself would otherwise forward the request
#: in a circle until the client's timeout.
HOPS_HEADER = "x-cachegate-hops"
#: A request that arrives having passed this many gateways is refused with ``508``.
MAX_HOPS = 8
T = TypeVar("T")

#: Objects and arrays nested deeper than this in a request body get ``400`` (a real request
#: nests a few levels: tools' JSON schemas perhaps a dozen).
MAX_NESTING = 64
#: The tenant of the gateway in front, as an opaque digest (:func:`tenant_partition`). A
#: cachegate behind another one (a ``cachegate worker``) keeps those tenants apart in its own
#: caches: the partition is appended to the tenant it authenticated, never replaces it.
PARTITION_HEADER = "x-cachegate-partition"
#: Seconds within which the gateway in front must hear from a stream (its ``timeout.read``,
#: with room to spare): a local model sends its keep-alive comment at least this often.
KEEPALIVE_HEADER = "x-cachegate-keepalive"
#: The shortest keep-alive interval a local model keeps, whatever that header asks (any
#: client of a gateway's own local model can send it).
KEEPALIVE_MIN = 0.5
#: Sent (``1``) by a gateway that has other replicas to try: a local model still loading
#: answers ``503 model_loading`` at once instead of making the request wait for the load.
IF_READY_HEADER = "x-cachegate-if-ready"
#: Which of a key's organizations and projects pays for (and may see) a request.
ACCOUNT_HEADERS = ("openai-organization", "openai-project")

#: Most inputs one embeddings request may carry (OpenAI's limit).
MAX_EMBEDDING_INPUTS = 2048

_Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_TopP = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
_N = Annotated[int, msgspec.Meta(ge=1, le=128)]
_MaxTokens = Annotated[int, msgspec.Meta(ge=1)]
_Stop = str | Annotated[list[str], msgspec.Meta(max_length=4)]
#: OpenAI's seeds are 64-bit integers.
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
#: OpenAI's ``metadata``: up to 16 string values, keys of up to 64 characters, values of 512.
Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, msgspec.Meta(max_length=512)]],
    msgspec.Meta(max_length=16),
]
#: The integer fields of each API's requests. JSON has one number type: ``3.0`` is the integer
#: 3 to JSON Schema (what OpenAI's validator follows) and to vLLM, and the cache keys hash them
#: the same; ``3.5`` stays a 400.
_INTEGERS = {
    "chat": ("n", "max_tokens", "max_completion_tokens", "seed", "top_logprobs"),
    "completion": ("n", "max_tokens", "seed", "logprobs"),
}


class _StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class _Part(msgspec.Struct):
    """A content part; other part fields (``image_url``, ``input_audio``, ...) pass through."""

    type: str
    text: str | None = None


class _Message(msgspec.Struct):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[_Part] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _Sampling(msgspec.Struct):
    model: str
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    n: _N | None = None
    max_tokens: _MaxTokens | None = None
    stop: _Stop | None = None
    seed: Seed | None = None
    presence_penalty: _Penalty | None = None
    frequency_penalty: _Penalty | None = None
    user: str | None = None


class _ChatBody(_Sampling):
    messages: Annotated[list[_Message], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=list
    )
    max_completion_tokens: _MaxTokens | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None
    # NOTE: fields that never change the answer, typed as OpenAI types them: a wrong one was
    # answered by the local model, where OpenAI refuses it (found by a review)
    metadata: Metadata | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    parallel_tool_calls: bool | None = None


class _CompletionBody(_Sampling):
    prompt: str | list[str | int | list[int]] = ""
    #: OpenAI's completions take 0: with ``echo`` and ``logprobs``, a prompt is scored and
    #: nothing is generated (evaluation harnesses ask so).
    max_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    logprobs: Annotated[int, msgspec.Meta(ge=0, le=5)] | None = None
    echo: bool | None = None
    suffix: str | None = None


def partitioned(tenant: str, partition: str) -> str:
    """The tenant a request's caches use: its own, subdivided by the front gateway's.

    NOTE: joined by a control character, which no tenant name (config) or partition (header)
    may hold: tenant "acme" with partition "dev" can never equal a tenant named "acme/dev".
    """
    return f"{tenant}\x1f{partition}" if partition else tenant


def unpartitioned(name: str) -> str:
    """The tenant a ``partitioned`` name subdivides (a name not partitioned: itself)."""
    return name.partition("\x1f")[0]


def request_tenant(tenant: str, headers: Mapping[str, str]) -> str:
    """The tenant a request's caches use: the authenticated one, with the front gateway's
    partition (``x-cachegate-partition``) when it sent one."""
    return partitioned(tenant, _partition(one_header(headers, PARTITION_HEADER)))


def tenant_partition(tenant: str, secret: str | None = None) -> str:
    """What a gateway sends upstream as ``x-cachegate-partition``: tenant names stay private.

    With ``secret`` (the model's upstream API key) it is an HMAC, which nobody without the
    key can compute for a tenant name they know.
    """
    data = tenant.encode("utf-8", "surrogatepass")
    if secret:
        return hmac.new(secret.encode("utf-8", "surrogatepass"), data, "sha256").hexdigest()[:32]
    return hashlib.sha256(data).hexdigest()[:32]


def parse_request(
    kind: Kind, raw: bytes, headers: Mapping[str, str], tenant: str
) -> GatewayRequest:
    """Decode and validate a request body; raises APIError(400) with ``param`` on bad input."""
    _hops(headers.get(HOPS_HEADER))  # first: a loop is refused whatever its body says
    body = decode_body(raw)
    if "model" not in body:
        raise APIError(400, "You must provide a model parameter.", param="model", code="missing")
    if kind == "chat" and "messages" not in body:
        raise APIError(
            400, "Missing required parameter: 'messages'.", param="messages", code="missing"
        )
    if kind == "completion" and "prompt" not in body:
        raise APIError(400, "Missing required parameter: 'prompt'.", param="prompt", code="missing")
    if kind == "embedding":
        extension = body.pop("cache", None)
        _check_embedding(body)
        return gateway_request(kind, body, headers, tenant, extension)
    extension = body.pop("cache", None)
    spec: type[_Sampling] = _ChatBody if kind == "chat" else _CompletionBody
    integral(body, _INTEGERS[kind])
    parsed = validated(body, spec)
    # NOTE: an empty string is a prompt (OpenAI answers it, a local model reads its BOS);
    # an empty list holds none.
    if isinstance(parsed, _CompletionBody) and parsed.prompt == []:
        raise APIError(400, "'prompt' must not be empty.", param="prompt", code="invalid_value")
    if isinstance(parsed, _ChatBody):
        _check_parts(parsed.messages)
    if parsed.stream_options is not None and not parsed.stream:  # OpenAI's and vLLM's 400
        raise APIError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )
    include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
    return gateway_request(
        kind, body, headers, tenant, extension, stream=bool(parsed.stream), usage=include_usage
    )


def gateway_request(
    kind: Kind,
    body: dict[str, Any],
    headers: Mapping[str, str],
    tenant: str,
    extension: Any = None,
    *,
    stream: bool = False,
    usage: bool = False,
) -> GatewayRequest:
    """The canonical request of a validated ``body`` (its ``model`` a string, its ``cache``
    extension removed and passed as ``extension``): what every adapter's ``parse`` returns.

    The request's cache controls, the tenant (with the front gateway's partition), hops and
    the client's account headers come from ``headers`` the same way for every API.
    """
    partition = _partition(one_header(headers, PARTITION_HEADER))
    return GatewayRequest(
        kind=kind,
        model=body["model"],
        body=body,
        stream=stream,
        include_usage=usage,
        tenant=partitioned(tenant, partition),
        control=parse_cache_control(headers, extension),
        hops=_hops(headers.get(HOPS_HEADER)),
        partition=partition,
        keepalive=_keepalive(headers.get(KEEPALIVE_HEADER)),
        if_ready=headers.get(IF_READY_HEADER) == "1",
        account=tuple((h, headers[h]) for h in ACCOUNT_HEADERS if headers.get(h)),
    )


def validated(body: dict[str, Any], spec: type[T]) -> T:
    """``body`` checked against ``spec`` (a msgspec Struct of the fields cachegate reasons
    about); a 400 naming the offending ``param`` otherwise."""
    try:
        return msgspec.convert(body, spec, strict=True)
    except msgspec.ValidationError as exc:
        param, message = _explain(exc)
        raise APIError(400, message, param=param, code="invalid_value") from None


def decode_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object; 400 when it is not one or nests too deeply."""
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        raise APIError(
            400,
            "We could not parse the JSON body of your request. The request body must be valid JSON.",
            code="invalid_json",
        ) from None
    # NOTE: depth first, so that a top-level array nested too deeply is told so, as an object is
    if _nesting(body) > MAX_NESTING:  # cache keys and checks walk the body recursively
        raise APIError(
            400, f"The request body nests deeper than {MAX_NESTING} levels.", code="invalid_json"
        )
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.", code="invalid_type")
    return body


def embedding_inputs(value: Any) -> list[str | list[int]]:
    """The separate inputs of an embeddings request: ``"text"`` and ``[1, 2]`` are one each."""
    if isinstance(value, str) or (value and all(_is_token(t) for t in value)):
        return [value]
    return list(value)


def integral(body: dict[str, Any], names: tuple[str, ...]) -> None:
    """The integral floats among ``body``'s fields ``names`` become ints, in place: what the
    model (or the upstream) is then sent."""
    for name in names:
        value = body.get(name)
        if isinstance(value, float) and value.is_integer():
            body[name] = int(value)


def _check_embedding(body: dict[str, Any]) -> None:
    if not isinstance(body.get("model"), str):
        raise APIError(400, "'model' must be a string.", param="model", code="invalid_type")
    value = body.get("input")
    if value is None:
        raise APIError(400, "Missing required parameter: 'input'.", param="input", code="missing")
    shape = "'input' must be a non-empty string, array of strings, or array of token arrays."
    if not isinstance(value, str | list) or value in ("", []):
        raise APIError(400, shape, param="input", code="invalid_value")
    inputs = embedding_inputs(value)
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise APIError(
            400,
            f"'input' may hold at most {MAX_EMBEDDING_INPUTS} inputs, got {len(inputs)}.",
            param="input",
            code="invalid_value",
        )
    strings = isinstance(inputs[0], str)  # all strings, or all token arrays: not a mix
    for i, item in enumerate(inputs):
        if strings:
            ok = isinstance(item, str) and item != ""
        else:
            ok = isinstance(item, list) and bool(item) and all(_is_token(t) for t in item)
        if not ok:
            raise APIError(400, shape, param=f"input[{i}]", code="invalid_value")
    encoding = body.get("encoding_format")
    if encoding is not None and encoding not in ("float", "base64"):
        raise APIError(
            400,
            "'encoding_format' must be 'float' or 'base64'.",
            param="encoding_format",
            code="invalid_value",
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and not (_is_token(dimensions) and dimensions >= 1):
        raise APIError(
            400,
            "'dimensions' must be a positive integer.",
            param="dimensions",
            code="invalid_value",
        )
    if "stream" in body and body["stream"] not in (None, False):
        raise APIError(400, "Embeddings cannot be streamed.", param="stream", code="invalid_value")
    if not isinstance(body.get("user", ""), str | None):  # (as chat types it: was a hit)
        raise APIError(400, "'user' must be a string.", param="user", code="invalid_type")


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_cache_control(headers: Mapping[str, str], extension: Any = None) -> CacheControl:
    """Merge ``cache-control`` / ``x-cache-*`` headers with the body's ``cache`` object.

    >>> parse_cache_control({"cache-control": "no-store", "x-cache-ttl": "60"})
    CacheControl(no_cache=False, no_store=True, namespace='', threshold=None, ttl=60.0, max_age=None)
    """
    directives = {d.strip().lower() for d in list_header(headers, "cache-control").split(",")}
    no_cache = "no-cache" in directives
    no_store = "no-store" in directives
    max_age = None
    for directive in directives:
        if directive.startswith("max-age="):
            value = directive[8:]
            if len(value) > 1 and value[0] == value[-1] == '"':  # (RFC 9111 5.2: accepted too)
                value = value[1:-1]
            max_age = _number(value, "cache-control: max-age", 0.0, None, allow_zero=True)
    namespace = check_namespace(one_header(headers, "x-cache-namespace") or "", "x-cache-namespace")
    threshold = _number(one_header(headers, "x-cache-threshold"), "x-cache-threshold", 0.0, 1.0)
    ttl = _ttl(one_header(headers, "x-cache-ttl"), "x-cache-ttl")

    control = CacheControl(no_cache, no_store, namespace, threshold, ttl, max_age)
    if extension is not None:
        control = _extension(extension, control)
    return control


def _extension(extension: Any, control: CacheControl) -> CacheControl:
    """The body's ``cache`` object applied over the controls the headers gave."""
    no_cache, no_store, namespace = control.no_cache, control.no_store, control.namespace
    threshold, ttl, max_age = control.threshold, control.ttl, control.max_age
    if not isinstance(extension, dict):
        raise APIError(400, "'cache' must be an object.", param="cache", code="invalid_type")
    for key, value in extension.items():
        name = key.replace("_", "-")
        if name in ("no-cache", "no-store"):
            if not isinstance(value, bool):
                raise APIError(400, f"'cache.{key}' must be a boolean.", param=f"cache.{key}")
            no_cache = no_cache or (name == "no-cache" and value)
            no_store = no_store or (name == "no-store" and value)
        elif name == "namespace":
            if not isinstance(value, str):
                raise APIError(400, "'cache.namespace' must be a string.", param="cache.namespace")
            namespace = check_namespace(value, "cache.namespace")
        elif name in ("threshold", "ttl", "max-age"):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise APIError(400, f"'cache.{key}' must be a number.", param=f"cache.{key}")
            if name == "threshold":
                threshold = _number(value, "cache.threshold", 0.0, 1.0)
            elif name == "ttl":
                ttl = _ttl(value, "cache.ttl")
            else:
                max_age = _number(value, f"cache.{key}", 0.0, None, allow_zero=True)
        else:
            raise APIError(400, f"Unknown cache option '{key}'.", param=f"cache.{key}")
    return CacheControl(no_cache, no_store, namespace, threshold, ttl, max_age)


# ---------------------------------------------------------------------------------------------
# helpers

_NAMESPACE = re.compile(r"[A-Za-z0-9._:\-]*")
_PARTITION = re.compile(r"[A-Za-z0-9._:\-]{1,64}")


def check_namespace(value: str, param: str) -> str:
    if len(value) > 128 or not _NAMESPACE.fullmatch(value):
        raise APIError(
            400,
            "The cache namespace must be at most 128 letters, digits or '._:-' characters.",
            param=param,
        )
    return value


def list_header(headers: Mapping[str, str], name: str) -> str:
    """A list header's value: its lines joined, as HTTP says they combine (a proxy may add a
    ``cache-control`` line of its own; ``get`` reads only the first line)."""
    getall = getattr(headers, "getall", None)  # (a multidict: the request's headers)
    return ", ".join(getall(name, ())) if getall is not None else headers.get(name, "")


def one_header(headers: Mapping[str, str], name: str) -> str | None:
    """A header that takes one value: a 400 when it comes on several lines (``get`` read the
    first alone, so a proxy's line added after the client's was silently ignored)."""
    getall = getattr(headers, "getall", None)  # (a multidict: the request's headers)
    lines = list(getall(name, ())) if getall is not None else []
    if len(lines) > 1:
        raise APIError(400, f"The '{name}' header is given {len(lines)} times: give it once.",
                       param=name, code="invalid_value")  # fmt: skip
    return headers.get(name)


def _keepalive(value: str | None) -> float | None:
    """The ``x-cachegate-keepalive`` seconds; None when absent or not a positive number (it
    only ever shortens the keep-alive interval, so a bad one is ignored, not refused)."""
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _hops(value: str | None) -> int:
    if value is None:
        return 0
    try:
        hops = int(value) if "_" not in value else -1  # (Python's 1_000: no header's number)
    except ValueError:  # also more than 4300 digits
        hops = -1
    if hops < 0:
        raise APIError(
            400, f"'{HOPS_HEADER}' must be a whole number, got {value[:20]!r}.", param=HOPS_HEADER
        )
    if hops >= MAX_HOPS:
        raise APIError(
            508,
            f"The request has already passed through {hops} cachegate gateways: a gateway's "
            "upstream base_url probably leads back to itself.",
            code="loop_detected",
            headers=dict(NO_RETRY),
        )
    return hops


def _nesting(value: Any) -> int:
    """How deeply objects and arrays nest in ``value`` (iteratively: any depth is safe)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:  # deeper than the limit: no need to look further
                todo.extend(
                    (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
                )
    return deepest


def _partition(value: str | None) -> str:
    if value is None:
        return ""
    if not _PARTITION.fullmatch(value):
        raise APIError(
            400,
            f"'{PARTITION_HEADER}' must be 1-64 letters, digits or '._:-', got {value[:20]!r}.",
            param=PARTITION_HEADER,
        )
    return value


def _check_parts(messages: list[_Message]) -> None:
    for i, message in enumerate(messages):
        if not isinstance(message.content, list):
            continue
        for j, part in enumerate(message.content):
            if part.type == "text" and part.text is None:
                param = f"messages[{i}].content[{j}].text"
                raise APIError(
                    400, f"Missing required parameter: '{param}'.", param=param, code="missing"
                )


def _number(
    value: Any, param: str, low: float, high: float | None, *, allow_zero: bool = False
) -> float | None:
    """A number in [low, high]; with no upper bound it must be > 0 (>= 0 with allow_zero)."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or (isinstance(value, str) and "_" in value):
            raise ValueError  # (Python's 1_000 is no number a header or JSON writes)
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float's range
        raise APIError(400, f"'{param}' must be a number.", param=param) from None
    if high is not None:
        inside, bound = low <= number <= high, f"between {low:g} and {high:g}"
    elif allow_zero:
        inside, bound = number >= 0, "at least 0"
    else:
        inside, bound = number > 0, "greater than 0"
    if not inside or number != number:  # NaN is never inside
        raise APIError(400, f"'{param}' must be {bound}, got {value}.", param=param)
    return number


def _ttl(value: Any, param: str) -> float | None:
    """Seconds greater than 0 and at most MAX_TTL (10 years): ``inf`` is refused too."""
    ttl = _number(value, param, 0.0, None)
    if ttl is not None and ttl > MAX_TTL:
        raise APIError(
            400,
            f"'{param}' must be at most {MAX_TTL:.0f} seconds (10 years), got {value}.",
            param=param,
        )
    return ttl


def _explain(exc: msgspec.ValidationError) -> tuple[str | None, str]:
    message = str(exc)
    match = re.search(r" - at `\$\.?(.*)`$", message)
    if not match:
        return None, f"Invalid request: {message}"
    # (msgspec names a dict's value ``[...]``, without its key: the dict is named instead)
    param = match.group(1).replace("[...]", "") or None
    what = message[: match.start()]
    return param, f"Invalid value for '{param}': {what[:1].lower()}{what[1:]}."
