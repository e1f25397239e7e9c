"""OpenTelemetry traces: one span per request, a child per tier, GenAI attributes, OTLP export."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from gateway.config import TracingConfig
from gateway.tracing import Tracing
from semantic.cache import ResponseCache
from tests.fake_upstream import FakeUpstream
from tests.gateway.test_metrics import sample


def traced(gw: Any) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    gw.runtime.tracing = Tracing(TracingConfig(enabled=True), exporter=exporter)
    return exporter


def by_trace(exporter: InMemorySpanExporter) -> dict[int, dict[str, Any]]:
    traces: dict[int, dict[str, Any]] = {}
    for span in exporter.get_finished_spans():
        assert span.context is not None
        traces.setdefault(span.context.trace_id, {})[span.name] = span
    return traces


def test_a_span_per_request_and_per_tier(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    exporter = traced(gw)
    assert gw.chat("trace me").headers["x-cache"] == "miss"
    assert gw.chat("trace me").headers["x-cache"] == "exact"
    miss, hit = sorted(by_trace(exporter).values(), key=lambda t: len(t), reverse=True)
    assert set(miss) == {"chat fake-model", "cache.lookup", "model", "cache.store"}
    assert set(hit) == {"chat fake-model", "cache.lookup"}
    root = miss["chat fake-model"]
    for child in ("cache.lookup", "model", "cache.store"):
        assert miss[child].parent.span_id == root.context.span_id
    attributes = root.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "fake-model"
    assert attributes["gen_ai.usage.input_tokens"] == 11
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 0
    assert (
        attributes["cachegate.cache"] == "miss" and attributes["http.response.status_code"] == 200
    )
    assert miss["cache.lookup"].attributes["cachegate.cache"] == "miss"
    assert hit["chat fake-model"].attributes["cachegate.cache"] == "exact"
    # a stream's span ends with the stream, and an error is a span too
    gw.chat("streamed", stream=True).read()
    gw.chat("x", model="missing")
    names = [s.name for s in exporter.get_finished_spans()]
    assert names.count("chat fake-model") == 3 and names[-1] == "chat"


def test_a_model_the_gateway_does_not_serve_is_not_a_span_name(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """Span names must take few values; a client's model name is any text it sends (each one
    was a span name of its own: "chat gpt-4o-2024-08-06", "chat <random>", ...)."""
    gw = make_gateway()
    exporter = traced(gw)
    for model in ("gpt-4o", "a" * 500, "user-1234 \u2603"):
        assert gw.chat("who?", model=model).status_code == 404
    embedded = gw.http.post("/v1/embeddings", json={"model": "nope", "input": "x"})
    assert embedded.status_code == 404
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat", "chat", "chat", "embeddings"]
    assert spans[1].attributes["gen_ai.request.model"] == "a" * 500  # (an attribute: kept)
    assert spans[3].attributes["http.response.status_code"] == 404


def test_an_embeddings_batch_has_one_span_per_tier(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """Its inputs are looked up, asked for and stored together: one span each, not one per
    input (and the upstream call is a span, as a chat request's is)."""
    gw = make_gateway()
    exporter = traced(gw)

    def embed(inputs: list[str]) -> None:
        body = {"model": "fake-model", "input": inputs}
        assert gw.http.post("/v1/embeddings", json=body).status_code == 200

    embed(["a", "b", "c"])
    embed(["c", "a"])
    spans = [s.name for s in exporter.get_finished_spans()]
    assert sorted(spans) == sorted(["embeddings fake-model", "cache.lookup", "model",
                                    "cache.store", "embeddings fake-model", "cache.lookup"])  # fmt: skip
    miss, hit = sorted(by_trace(exporter).values(), key=lambda t: len(t), reverse=True)
    for child in ("cache.lookup", "model", "cache.store"):
        assert miss[child].parent.span_id == miss["embeddings fake-model"].context.span_id
    assert miss["cache.lookup"].attributes["cachegate.cache"] == "miss"
    assert miss["model"].attributes["gen_ai.request.model"] == "fake-model"
    assert hit["cache.lookup"].attributes["cachegate.cache"] == "exact"


def test_a_request_that_fails_unexpectedly_is_traced_and_counted(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure nothing expected (here a bug in the cache lookup) is a 500 that ends its span
    and counts in /metrics like any error (it did neither: its span never ended)."""
    gw = make_gateway()
    exporter = traced(gw)

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ResponseCache, "lookup", broken)
    response = gw.chat("unreadable")
    assert response.status_code == 500 and response.json()["error"]["code"] == "internal_error"
    assert response.headers["x-request-id"].startswith("req_")
    (root,) = [s for s in exporter.get_finished_spans() if s.name == "chat fake-model"]
    assert root.attributes is not None and root.attributes["http.response.status_code"] == 500
    assert root.attributes["cachegate.request_id"] == response.headers["x-request-id"]
    assert root.status.status_code == StatusCode.ERROR
    metrics = gw.http.get("/metrics").text
    assert sample(metrics, "cachegate_requests_total", cache="bypass", status="500") == 1


class _Collector(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        _Collector.received.append(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Collector.received = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()


def test_spans_are_exported_over_otlp(
    make_gateway: Any, upstream: FakeUpstream, collector: str
) -> None:
    gw = make_gateway(f"tracing: {{enabled: true, endpoint: '{collector}', service_name: cg-test}}")
    assert gw.chat("exported").status_code == 200
    gw.stop()  # shutting down exports what is batched
    names, services = set(), set()
    for body in _Collector.received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            services |= {a.value.string_value for a in resource_spans.resource.attributes
                         if a.key == "service.name"}  # fmt: skip
            names |= {s.name for scope in resource_spans.scope_spans for s in scope.spans}
    assert services == {"cg-test"}
    assert {"chat fake-model", "cache.lookup", "model", "cache.store"} <= names
