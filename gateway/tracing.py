"""OpenTelemetry traces (optional: ``pip install 'cachegate[otel]'``, ``tracing.enabled``).

One span per request (``chat gpt-4o``: GenAI semantic conventions' ``{operation} {model}``;
``chat`` alone for a model the gateway does not serve, whose name is the client's free text),
with a child span per tier it passed: ``cache.lookup``, ``coalesce.wait``, ``model`` (the
backend call) and ``cache.store``. Spans are exported over OTLP/HTTP::

    tracing:
      enabled: true
      endpoint: http://otel-collector:4318/v1/traces

The request span carries ``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.provider.name``, ``gen_ai.usage.input_tokens`` / ``output_tokens`` /
``cache_read.input_tokens`` / ``cache_creation.input_tokens``, and cachegate's own
``cachegate.cache`` (x-cache), ``cachegate.request_id``, ``cachegate.tenant``,
``cachegate.similarity`` on semantic hits, and ``http.response.status_code``.

NOTE: with tracing off nothing here imports OpenTelemetry, and ``tier`` costs one global read.
The tier spans find their parent and tracer through OpenTelemetry's own context, which the
HTTP layer sets around the tier walk (``RequestTrace.active``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .config import ConfigError, TracingConfig
from .ledger import Usage

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["RequestTrace", "Tracing", "tier"]

#: Set once any tracing is built: until then ``tier`` does nothing at all.
_ENABLED = False
_TRACER_KEY = "cachegate.tracer"

_OPERATIONS = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings",
               "responses": "chat", "messages": "chat"}  # fmt: skip


class Tracing:
    """The tracer provider of one gateway (its own, not the process-global one)."""

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        global _ENABLED
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
            from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
        except ImportError:
            raise ConfigError(
                "tracing.enabled needs OpenTelemetry: pip install 'cachegate[otel]'"
            ) from None
        resource = Resource.create({"service.name": config.service_name})
        self.provider = TracerProvider(
            resource=resource, sampler=TraceIdRatioBased(config.sample_rate)
        )
        if exporter is None:
            self.provider.add_span_processor(BatchSpanProcessor(_otlp(config)))
        else:  # (tests: an in-memory exporter sees each span as it ends)
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("cachegate")
        _ENABLED = True

    def start(
        self, kind: str, model: str, request_id: str, tenant: str, *, configured: bool
    ) -> RequestTrace:
        """The span of a request for ``model`` (``configured``: one of the gateway's models).

        NOTE: span names must take few values (tracing backends index them): a model the
        gateway does not serve is the client's free text, so it is named ``{operation}``
        alone, as the GenAI conventions name a span without a model, and kept in
        ``gen_ai.request.model``."""
        from opentelemetry.trace import SpanKind

        operation = _OPERATIONS.get(kind, kind)
        name = f"{operation} {model}" if configured else operation
        span = self.tracer.start_span(name, kind=SpanKind.SERVER)
        span.set_attributes({
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": model,
            "cachegate.request_id": request_id,
            "cachegate.tenant": tenant,
        })  # fmt: skip
        return RequestTrace(self.tracer, span)

    def close(self) -> None:
        self.provider.shutdown()


class RequestTrace:
    """The span of one request: ``active()`` around the tier walk, ``end()`` once answered."""

    def __init__(self, tracer: Any, span: Any) -> None:
        self._tracer, self.span = tracer, span

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Make this the parent of the tier spans opened meanwhile (``tier``)."""
        from opentelemetry import context, trace

        ctx = context.set_value(_TRACER_KEY, self._tracer, trace.set_span_in_context(self.span))
        token = context.attach(ctx)
        try:
            yield
        finally:
            context.detach(token)

    def end(
        self,
        *,
        status: int,
        cache: str,
        provider: str,
        usage: Usage | None,
        similarity: float | None = None,
    ) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self.span
        span.set_attributes({
            "http.response.status_code": status, "cachegate.cache": cache,
            "gen_ai.provider.name": provider,
        })  # fmt: skip
        if usage is not None:
            span.set_attributes({
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            })  # fmt: skip
        if similarity is not None:
            span.set_attribute("cachegate.similarity", round(similarity, 4))
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()


@contextlib.contextmanager
def tier(name: str, **attributes: Any) -> Iterator[Any]:
    """A child span of the current request's span (nothing when tracing is off).

    >>> with tier("cache.lookup") as span:
    ...     found = await cache.lookup(key)
    ...     if span: span.set_attribute("cachegate.cache", found.kind)
    """
    if not _ENABLED:
        yield None
        return
    from opentelemetry import context

    tracer: Any = context.get_value(_TRACER_KEY)
    if tracer is None:  # outside a traced request (a stream's relay, a background task)
        yield None
        return
    with tracer.start_as_current_span(name, attributes=attributes or None) as span:
        yield span


def _otlp(config: TracingConfig) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = config.endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return OTLPSpanExporter(endpoint=endpoint)  # None: OTEL_EXPORTER_OTLP_ENDPOINT or localhost
