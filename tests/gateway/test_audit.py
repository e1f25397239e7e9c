"""The semantic audit through the HTTP API: a sampled semantic hit is served, then asked again of
its model in the background, and the verdict shows in /metrics, /admin/stats and the ledger.

Real embedder, real HTTP on 127.0.0.1, the fake upstream answering what each test tells it
(``fake.contents``: the k-th request of one scope gets the k-th answer). Background work is
waited for by polling, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
import yaml

from gateway.audit import AuditJob, Auditor, audit_scope
from gateway.canonical import Answer, GatewayRequest
from gateway.chat import CHAT, COMPLETION
from gateway.cli import main
from gateway.config import ConfigError, load_config_text
from gateway.messages_bridge import MESSAGES
from gateway.metrics import Metrics
from gateway.responses import ResponsesAdapter
from gateway.stored import ResponseStore
from semantic import audit as audit_module
from semantic.audit import Audit, Tightening, Verdict
from semantic.verifier import Calibration
from tests.browser import Browser
from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream, ThreadedServer

STORED = "How do I reset my password?"
PARAPHRASE = "How can I reset my password?"  # a semantic hit of STORED (test_semantic_api)
WAIT = 120.0  # seconds: CI is a loaded 2-core machine


def config_text(upstream_url: str, data_dir: Path, **semantic: Any) -> str:
    """A gateway that audits every semantic hit. NOTE: controls off unless asked for: each
    audit is then one model call (the controls' second call is tested on its own)."""
    url = f"{upstream_url}/v1"
    semantic = {"enabled": True, "audit_rate": 1.0, "audit_controls": False, **semantic}
    return yaml.safe_dump({
        "data_dir": str(data_dir),
        "cache": {"semantic": semantic},
        "models": {
            # NOTE: no retries, so an upstream failure is the audit's, not hidden by a retry
            "fake-model": {"backend": "openai", "base_url": url, "api_key": "sk-gateway",
                           "max_retries": 0},
            # a short read timeout, for the audit that times out (and only for it)
            "impatient-model": {"backend": "openai", "base_url": url, "api_key": "sk-gateway",
                                "max_retries": 0, "timeout": {"read": 3.0}},
            # retries as configured by default: for client requests, never for audits
            "retrying-model": {"backend": "openai", "base_url": url, "api_key": "sk-gateway",
                               "retry_backoff": 0.05},
            # two replicas (both this upstream): a 500 fails over to the other (max_retries)
            "replicated-model": {"backend": "openai", "replicas": [url, url],
                                 "api_key": "sk-gateway"},
            # the same, for the conversation pinned to the replica that made it (marked down)
            "pinned-model": {"backend": "openai", "replicas": [url, url], "api_key": "sk-gateway"},
            # no key of its own: the client's key goes upstream (and partitions the cache)
            "open-model": {"backend": "openai", "base_url": url, "max_retries": 0},
        },
        "prices": {"fake-model": {"input": 2.5, "output": 10}},
    })  # fmt: skip


@pytest.fixture(scope="module")
def gw(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    text = config_text(upstream_server.url, tmp_path_factory.mktemp("audit"))
    with Gateway(load_config_text(text)) as gateway:
        yield gateway


def ask(gw: Gateway, question: str, ns: str, fake: dict[str, Any], **body: Any) -> httpx.Response:
    headers = {"x-cache-namespace": ns, **body.pop("headers", {})}
    payload = {"model": body.pop("model", "fake-model"), "fake": fake,
               "messages": [{"role": "user", "content": question}], **body}  # fmt: skip
    response = gw.http.post("/v1/chat/completions", json=payload, headers=headers)
    assert response.status_code == 200, response.text
    return response


def served_then_hit(
    gw: Gateway, ns: str, fake: dict[str, Any], **body: Any
) -> tuple[httpx.Response, httpx.Response]:
    first = ask(gw, STORED, ns, fake, **body)
    assert first.headers["x-cache"] == "miss"
    hit = ask(gw, PARAPHRASE, ns, fake, **body)
    assert hit.headers["x-cache"] == "semantic"
    return first, hit


def estimate(
    gw: Gateway, ns: str, model: str = "fake-model", tenant: str | None = None
) -> dict[str, Any] | None:
    """The audit's row of ``ns`` (and ``tenant``: any when None) in /admin/stats."""
    rows = gw.http.get("/admin/stats").json()["cache"]["audit"]["estimates"]
    return next((r for r in rows if r["model"] == model and r["namespace"] == ns
                 and (tenant is None or r["tenant"] == tenant)), None)  # fmt: skip


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def settled(
    gw: Gateway, ns: str, n: int, model: str = "fake-model", tenant: str | None = None
) -> dict[str, Any]:
    """The namespace's estimate once ``n`` audits have ended, whatever their verdict."""

    def done() -> dict[str, Any] | None:
        row = estimate(gw, ns, model, tenant)
        return row if row and row["audits"] + row["errors"] + row["dropped"] >= n else None

    return wait_for(done, f"{n} audits in namespace {ns}")  # type: ignore[no-any-return]


def audits_total(gw: Gateway, verdict: str, model: str = "fake-model") -> float:
    return counter(gw, f'cachegate_semantic_audits_total{{model="{model}",verdict="{verdict}"}}')


def counter(gw: Gateway, series: str) -> float:
    match = re.search(re.escape(series + " ") + r"(\S+)", gw.http.get("/metrics").text)
    return float(match.group(1)) if match else 0.0


def test_a_semantic_hit_is_audited_once_and_the_audit_answer_is_not_stored(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    ok_before = audits_total(gw, "ok")
    fake = {"content": "Open the login page and click 'Forgot password'."}
    first, hit = served_then_hit(gw, "same", fake)
    assert hit.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    row = settled(gw, "same", 1)
    assert (row["audits"], row["wrong"], row["errors"]) == (1, 0, 0)
    assert row["false_hit_rate"] == 0.0 and row["interval95"][0] == 0.0
    assert 0.5 < row["interval95"][1] < 1.0  # one audit: a wide interval
    assert upstream.stats["chat"] == 2  # the miss, and the one audit
    sent = upstream.last_body
    assert sent["messages"][0]["content"] == PARAPHRASE and "stream" not in sent
    assert audits_total(gw, "ok") == ok_before + 1
    # the audit's answer was not stored: the paraphrase is still a semantic hit, not exact
    stats = gw.http.get("/admin/stats").json()
    assert stats["cache"]["stores"] >= 1
    entries = gw.http.get("/admin/cache/entries", params={"namespace": "same"}).json()["data"]
    assert len(entries) == 1
    assert ask(gw, PARAPHRASE, "same", fake).headers["x-cache"] == "semantic"
    settled(gw, "same", 2)
    # ... its cost is its own line in the ledger: not a request, not a saving
    account = stats["ledger"]["default"]["fake-model"]
    assert account["audit_calls"] >= 1 and account["audit_usd"] > 0
    assert account["audit_output_tokens"] >= len(fake["content"].split())


@pytest.fixture(scope="module")
def controlled(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """A gateway with the default audit controls (every judged audit asked a second time)."""
    data_dir = tmp_path_factory.mktemp("controls")
    config = yaml.safe_load(config_text(upstream_server.url, data_dir))
    del config["cache"]["semantic"]["audit_controls"]  # (the default: on)
    with Gateway(load_config_text(yaml.safe_dump(config))) as gateway:
        yield gateway


def controls_total(gw: Gateway, verdict: str, model: str = "fake-model") -> float:
    return counter(
        gw, f'cachegate_semantic_audit_controls_total{{model="{model}",verdict="{verdict}"}}'
    )


def test_a_control_asks_the_audited_request_again_and_the_estimate_is_net_of_it(
    controlled: Gateway, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = controlled
    assert gw.http.get("/admin/stats").json()["cache"]["audit"]["controls"] is True
    assert controls_total(gw, "wrong") == 0.0  # (exported at 0 from the start)
    # the model answers the audited request as it answered the stored one, twice
    steady = {"content": "Open the login page and click 'Forgot password'."}
    served_then_hit(gw, "ctl-steady", steady)
    row = wait_for(lambda: (r := estimate(gw, "ctl-steady")) and r["controls"] and r,
                   "the control")  # fmt: skip
    assert (row["audits"], row["wrong"], row["controls"], row["control_wrong"]) == (1, 0, 1, 0)
    assert upstream.stats["chat"] == 3  # the miss, the audit, its control
    assert upstream.last_body["messages"][0]["content"] == PARAPHRASE
    assert controls_total(gw, "ok") == 1.0
    # a wrong hit: the audit's answer differs from the served one, the control's does not
    wrong = {"contents": ["The basic plan costs 10 dollars a month.",
                          "The basic plan costs 25 dollars a month."]}  # fmt: skip
    served_then_hit(gw, "ctl-wrong", wrong)
    # (the control's call is the third of this list: the first answer again, 10 against 25)
    row = wait_for(lambda: (r := estimate(gw, "ctl-wrong")) and r["controls"] and r,
                   "the control")  # fmt: skip
    assert (row["audits"], row["wrong"], row["controls"], row["control_wrong"]) == (1, 1, 1, 1)
    assert row["judged_wrong_rate"] == 1.0
    assert row["interval95"] == [0.0, 1.0]  # every control wrong: the judge tells nothing
    assert controls_total(gw, "wrong") == 1.0
    # a control whose call fails leaves the estimate as judged, and is counted
    failing = {"contents": ["Reset it from your profile page.",
                            "Reset it from your profile page.", {"status": 503}]}  # fmt: skip
    served_then_hit(gw, "ctl-fail", failing)
    row = wait_for(lambda: (r := estimate(gw, "ctl-fail")) and r["control_errors"] and r,
                   "the failed control")  # fmt: skip
    assert (row["audits"], row["wrong"], row["controls"]) == (1, 0, 0)
    assert controls_total(gw, "error") == 1.0
    # both calls of every audit are in the ledger (the failed one had no usage to book)
    account = gw.http.get("/admin/stats").json()["ledger"]["default"]["fake-model"]
    assert account["audit_calls"] == 5
    # the operator's view: `cachegate stats` shows the controls beside the estimate
    capsys.readouterr()
    assert main(["stats", "--url", gw.url]) == 0
    out = capsys.readouterr().out
    assert "net of controls" in out and "CONTROLS WRONG" in out and "1 of 1" in out


def test_every_verdicts_series_is_exported_at_zero_before_its_first_audit(
    gw: Gateway, tight: Gateway
) -> None:
    """A counter series that first appears at 1 loses that increment to rate() and
    increase(), and ``wrong / (ok + wrong)`` has no value while ``ok`` is missing (every audit
    wrong so far: the alarm itself), so each configured model's series start at 0."""
    text = gw.http.get("/metrics").text
    for verdict in ("ok", "wrong", "error", "dropped"):  # (no test audits a wrong answer here)
        series = f'cachegate_semantic_audits_total{{model="impatient-model",verdict="{verdict}"}}'
        assert series in text, series
    assert "cachegate_semantic_tightenings_total{" not in text  # auto-tighten is off
    assert "cachegate_semantic_audit_controls_total{" not in text  # controls are off here
    series = 'cachegate_semantic_tightenings_total{model="open-model"} 0.0'
    assert series in tight.http.get("/metrics").text


def test_a_different_fresh_answer_is_a_wrong_verdict(gw: Gateway, upstream: FakeUpstream) -> None:
    wrong_before = audits_total(gw, "wrong")
    costs = {"contents": ["The basic plan costs 10 dollars a month.",
                          "The basic plan costs 25 dollars a month."]}  # fmt: skip
    _, hit = served_then_hit(gw, "numbers", costs)
    assert "10 dollars" in hit.json()["choices"][0]["message"]["content"]  # served as usual
    row = settled(gw, "numbers", 1)
    assert (row["audits"], row["wrong"], row["false_hit_rate"]) == (1, 1, 1.0)
    # no shared number: the answers' embeddings tell them apart
    topics = {"contents": ["Paris is the capital of France.",
                           "Bananas are rich in potassium and fibre."]}  # fmt: skip
    served_then_hit(gw, "topics", topics)
    assert settled(gw, "topics", 1)["wrong"] == 1
    assert audits_total(gw, "wrong") == wrong_before + 2
    assert upstream.stats["chat"] == 4


def test_a_streamed_semantic_hit_is_audited_with_one_unstreamed_call(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    fake = {"content": "Use the reset link on the sign-in page."}
    assert ask(gw, STORED, "stream", fake).headers["x-cache"] == "miss"
    body = {"model": "fake-model", "fake": fake, "stream": True,
            "messages": [{"role": "user", "content": PARAPHRASE}]}  # fmt: skip
    headers = {"x-cache-namespace": "stream"}
    with gw.http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        assert response.headers["x-cache"] == "semantic"
        assert "data: [DONE]" in response.read().decode()
    row = settled(gw, "stream", 1)
    assert (row["audits"], row["wrong"]) == (1, 0)
    assert upstream.stats["chat"] == 2 and "stream" not in upstream.last_body


def test_exact_hits_are_not_audited(gw: Gateway, upstream: FakeUpstream) -> None:
    fake = {"content": "Exact answers are served as stored."}
    for _ in range(3):
        ask(gw, STORED, "exact", fake)
    served_then_hit(gw, "exact-then-semantic", fake)
    row = settled(gw, "exact-then-semantic", 1)
    assert row["audits"] == 1
    assert estimate(gw, "exact") is None  # three requests, two exact hits: no audit
    assert upstream.stats["chat"] == 3  # two misses and one audit


def test_an_identical_request_found_by_the_semantic_tier_is_not_audited(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """With ``cache.exact.enabled: false`` the identical request is a semantic hit (similarity
    1.0): the model's answer to that very request, which an audit would only see reworded."""
    config = yaml.safe_load(config_text(upstream_server.url, tmp_path))
    config["cache"]["exact"] = {"enabled": False}
    gw = Gateway(load_config_text(yaml.safe_dump(config)))
    try:
        fake = {"content": "Open the login page and click 'Forgot password'."}
        assert ask(gw, STORED, "identical", fake).headers["x-cache"] == "miss"
        assert ask(gw, STORED, "identical", fake).headers["x-cache"] == "semantic"
        assert ask(gw, PARAPHRASE, "identical", fake).headers["x-cache"] == "semantic"
        settled(gw, "identical", 1)
        wait_for(lambda: gw.http.get("/admin/stats").json()["cache"]["audit"]["running"] == 0,
                 "the audits to end")  # fmt: skip
        row = estimate(gw, "identical")
        assert row is not None and row["audits"] + row["errors"] + row["dropped"] == 1, row
        assert upstream.stats["chat"] == 2  # the miss, and the paraphrase's audit
        assert upstream.last_body["messages"][0]["content"] == PARAPHRASE
    finally:
        gw.stop()


@pytest.mark.parametrize(
    ("model", "failure"),
    [("fake-model", {"status": 503}), ("impatient-model", {"delay": 60})],
    ids=["5xx", "timeout"],
)
def test_a_failing_audit_is_an_error_verdict_and_never_reaches_the_client(
    gw: Gateway, upstream: FakeUpstream, model: str, failure: dict[str, Any]
) -> None:
    ns = f"fail-{next(iter(failure))}"
    errors_before = audits_total(gw, "error", model)
    fake = {"contents": ["Reset it from your profile page.", failure]}
    first, hit = served_then_hit(gw, ns, fake, model=model)
    assert hit.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    row = settled(gw, ns, 1, model)
    assert (row["audits"], row["errors"]) == (0, 1)
    assert row["interval95"] == [0.0, 1.0]  # nothing judged: nothing known
    assert audits_total(gw, "error", model) == errors_before + 1
    assert upstream.stats["chat"] == 2  # no retry: the audit's call was made once


@pytest.mark.parametrize(
    ("model", "why"), [("retrying-model", "HTTP 500"), ("replicated-model", "failover")]
)
def test_an_audit_is_sent_once_where_a_clients_request_is_retried(
    gw: Gateway, upstream: FakeUpstream, model: str, why: str
) -> None:
    """An audit is optional work: on a failing upstream its model's ``max_retries`` would only
    add load (and hide the failure behind a retried answer). It fails as an error verdict."""
    retries = f'cachegate_upstream_retries_total{{model="{model}",why="{why}"}}'
    retried_before = counter(gw, retries)
    failing = {"status": 500}
    fake = {"contents": [failing, "Reset it from your profile page.", failing, "Reset it."]}
    first, hit = served_then_hit(gw, f"no-retry-{model}", fake, model=model)
    assert hit.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    row = settled(gw, f"no-retry-{model}", 1, model)
    assert (row["audits"], row["errors"]) == (0, 1), row
    assert upstream.stats["chat"] == 3  # the client's 500 and its retry, the audit's 500
    assert counter(gw, retries) == retried_before + 1  # the client's retry alone


def test_the_audit_goes_upstream_with_the_clients_own_key(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A model without a key of its own forwards the client's: so does its audit."""
    fake = {"content": "Use the reset link."}
    headers = {"authorization": "Bearer sk-client-a", "openai-organization": "org-a"}
    served_then_hit(gw, "keys", fake, model="open-model", headers=headers)
    assert upstream.last_headers["authorization"] == "Bearer sk-client-a"
    settled(gw, "keys", 1, model="open-model")
    assert upstream.stats["chat"] == 2
    assert upstream.last_headers["authorization"] == "Bearer sk-client-a"
    assert upstream.last_headers["openai-organization"] == "org-a"
    # past any cache behind this one (another cachegate): to a model
    assert upstream.last_headers["cache-control"] == "no-cache, no-store"
    # the audit is billed to the account its requests are booked under (not to the tenant
    # that routing keys by the client's key: no request is booked there)
    ledger = gw.http.get("/admin/stats").json()["ledger"]
    assert not [t for t in ledger if t.startswith("client-key:")], ledger
    (account,) = [a for a in ledger.values() if "open-model" in a]
    assert account["open-model"]["audit_calls"] == 1
    assert account["open-model"]["requests"] >= 2, account


def test_the_gateways_key_goes_upstream_for_a_model_that_has_one(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    fake = {"content": "The reset link is on the sign-in page."}
    served_then_hit(gw, "gateway-key", fake, headers={"authorization": "Bearer sk-client-b"})
    settled(gw, "gateway-key", 1)
    assert upstream.stats["chat"] == 2
    assert upstream.last_headers["authorization"] == "Bearer sk-gateway"


def test_audits_past_the_concurrency_limit_are_dropped_and_shutdown_cancels_them(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    text = config_text(upstream_server.url, tmp_path, audit_max_concurrency=1)
    gw = Gateway(load_config_text(text))
    try:
        slow = {"contents": ["Reset it on the login page.", {"delay": 300}]}
        served_then_hit(gw, "busy", slow)
        wait_for(lambda: upstream.stats["chat"] == 2, "the audit's call upstream")
        running = gw.http.get("/admin/stats").json()["cache"]["audit"]
        assert running["running"] == 1 and running["max_concurrency"] == 1
        assert ask(gw, PARAPHRASE, "busy", slow).headers["x-cache"] == "semantic"
        row = settled(gw, "busy", 1)
        assert (row["dropped"], row["audits"], row["errors"]) == (1, 0, 0)
        assert audits_total(gw, "dropped") == 1
    finally:
        gw.stop()
    # shutdown cancelled the running audit: its upstream call was closed
    wait_for(lambda: upstream.stats["cancelled"] == 1, "the audit's call to be cancelled")


def test_a_responses_api_hit_is_audited_and_the_upstream_keeps_no_response(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    fake = {"content": "Use the reset link on the sign-in page."}
    headers = {"x-cache-namespace": "responses"}
    for question, state in ((STORED, "miss"), (PARAPHRASE, "semantic")):
        body = {"model": "fake-model", "input": question, "fake": fake}
        response = gw.http.post("/v1/responses", json=body, headers=headers)
        assert response.status_code == 200 and response.headers["x-cache"] == state
    row = settled(gw, "responses", 1)
    assert (row["audits"], row["wrong"]) == (1, 0)
    assert upstream.stats["responses"] == 2 and upstream.last_body["input"] == PARAPHRASE
    assert upstream.last_body["store"] is False  # the audit leaves no response object behind
    texts = [part.get("text") for r in upstream.responses.values()  # (other tests' too)
             for item in r[0].get("output") or () for part in item.get("content") or ()]  # fmt: skip
    assert texts.count(fake["content"]) == 1


def test_an_audit_pinned_to_a_failing_replica_is_sent_once(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A follow-up goes to the replica that made its ``previous_response_id``; when it fails
    (502), a client's request goes on with the conversation on another replica. The audit's
    did too: a second call after a 5xx (an ``ok`` verdict that hid the failure)."""
    failovers = 'cachegate_upstream_retries_total{model="pinned-model",why="failover"}'
    failed_over = counter(gw, failovers)
    headers = {"x-cache-namespace": "pinned"}

    def create(question: str, fake: dict[str, Any], **body: Any) -> httpx.Response:
        body = {"model": "pinned-model", "input": question, "fake": fake, **body}
        response = gw.http.post("/v1/responses", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return response

    made = create("My name is Bob.", {"content": "Hello Bob."}).json()["id"]
    answer = "Reset it from your profile page."
    fake = {"contents": [answer, {"status": 502}, answer]}
    assert create(STORED, fake, previous_response_id=made).headers["x-cache"] == "miss"
    assert create(PARAPHRASE, fake, previous_response_id=made).headers["x-cache"] == "semantic"
    row = settled(gw, "pinned", 1, "pinned-model")
    assert (row["audits"], row["errors"]) == (0, 1), row
    assert upstream.stats["responses"] == 3  # the first turn, the miss, the audit's 502
    assert counter(gw, failovers) == failed_over


def test_the_text_an_audit_compares_in_each_api() -> None:
    chat = {
        "choices": [
            {
                "message": {
                    "content": "Hi.",
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": 1}'},
                        }
                    ],
                }
            }
        ]
    }
    assert CHAT.text(chat) == 'Hi.\nlookup({"q": 1})'
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "A"}]}}]}
    assert CHAT.text(parts) == "A"
    assert COMPLETION.text({"choices": [{"text": "B"}, {"text": "C"}]}) == "B\nC"
    response = {
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "D"}]},
            {"type": "function_call", "name": "f", "arguments": "{}"},
        ]
    }
    assert ResponsesAdapter(ResponseStore(), keyed=False).text(response) == "D\nf({})"
    message = {
        "content": [
            {"type": "text", "text": "E"},
            {"type": "tool_use", "name": "g", "input": {"x": 2}},
        ]
    }
    assert MESSAGES.text(message) == 'E\ng({"x":2})'
    assert CHAT.text({"error": "x"}) == MESSAGES.text({}) == ""  # fmt: skip


def test_cachegate_stats_prints_the_estimates(
    gw: Gateway, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = {"contents": ["Delivery takes 3 days.", "Delivery takes 7 days."]}
    served_then_hit(gw, "cli", costs)
    settled(gw, "cli", 1)
    assert main(["stats", "--url", gw.url]) == 0
    out = capsys.readouterr().out
    assert "semantic audit: 100% of semantic hits re-asked" in out and "WRONG-HIT RATE" in out
    row = next(line.split() for line in out.splitlines() if " cli " in line)
    assert row[:6] == ["default", "fake-model", "cli", "1", "1", "100.00%"]
    assert "AUDITS (SPENT)" in out


def test_audit_settings_are_validated(tmp_path: Path) -> None:
    for bad, message in (("audit_rate: 1.5", "audit_rate"),
                         ("audit_max_concurrency: 0", "audit_max_concurrency"),
                         ("auto_tighten: true", "needs max_wrong_rate"),
                         ("auto_tighten: true, max_wrong_rate: 0", "needs max_wrong_rate"),
                         ("auto_tighten: true, max_wrong_rate: 0.02, audit_rate: 0",
                          "needs audit_rate"),
                         ("auto_tighten: true, max_wrong_rate: 0.02, verifier: off",
                          "verifier deciding"),
                         ("auto_tighten: true, verifier_role: veto", "verifier deciding"),
                         ):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            load_config_text(f"cache: {{semantic: {{{bad}}}}}")
    assert load_config_text("").cache.semantic.auto_tighten is False
    config = load_config_text("cache: {semantic: {audit_rate: 0}}")
    assert config.cache.semantic.audit_rate == 0
    assert load_config_text("").cache.semantic.audit_rate == 0.01


# ---- auto-tighten ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tight(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """A gateway that tightens a scope when its audits show more than half its hits wrong
    (windows of 4 judged audits; max_wrong_rate 0.5 also sets a permissive start)."""
    text = config_text(upstream_server.url, tmp_path_factory.mktemp("tight"),
                       auto_tighten=True, max_wrong_rate=0.5)  # fmt: skip
    with Gateway(load_config_text(text)) as gateway:
        yield gateway


def test_auto_tighten_raises_a_scopes_threshold_until_its_wrong_hits_stop(
    tight: Gateway, upstream: FakeUpstream, tmp_path: Path
) -> None:
    gw = tight
    # every fresh answer gives another fee than the stored one: each audit says "wrong"
    fees = {"contents": [f"The fee is {10 * (i + 1)} dollars." for i in range(80)]}
    calm = {"content": "Open the login page and click 'Forgot password'."}
    assert ask(gw, STORED, "tight", fees).headers["x-cache"] == "miss"
    assert ask(gw, STORED, "calm", calm).headers["x-cache"] == "miss"
    stats = gw.http.get("/admin/stats").json()["cache"]
    base = stats["verifier"]["score_threshold"]
    assert stats["audit"]["auto_tighten"] == {"bound": 0.5, "window": 4}
    served = 0
    for _ in range(60):  # until the scope's threshold stops the hit (1.0 at the latest)
        response = ask(gw, PARAPHRASE, "tight", fees)
        if response.headers["x-cache"] != "semantic":
            break
        served += 1
        settled(gw, "tight", served)  # its audit has been judged (and counted)
    else:
        raise AssertionError("the wrong hits never stopped")
    assert response.headers["x-cache"] == "miss"
    assert served >= 4  # not before a whole window of audits said so
    row = estimate(gw, "tight")
    assert row is not None and row["wrong"] == served
    tightened = row["tightened"]
    assert tightened["steps"] >= 1 and tightened["score_threshold"] > base
    assert tightened["steps"] == served // 4  # one step per failed window, no more
    series = 'cachegate_semantic_tightenings_total{model="fake-model"}'
    assert counter(gw, series) == tightened["steps"]
    # other scopes keep the configured threshold
    assert ask(gw, PARAPHRASE, "calm", calm).headers["x-cache"] == "semantic"
    calm_row = settled(gw, "calm", 1)
    assert calm_row["tightened"]["steps"] == 0
    # the operator's view: the dashboard and `cachegate stats`
    assert main(["stats", "--url", gw.url]) == 0
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelector('#audit table') !== null")
        text = page.evaluate("document.getElementById('audit').innerText")
        assert "verifier threshold (auto-tighten)" in text
        assert f"{tightened['score_threshold']:.4f} ({tightened['steps']} step" in text
        assert "configured" in text  # the calm namespace
        assert page.errors == []
    # undone by the admin route: the scope's paraphrases hit again
    reset = gw.http.post("/admin/cache/tightening/reset", json={"namespace": "tight"})
    assert reset.status_code == 200 and reset.json() == {"reset": 1}
    assert estimate(gw, "tight")["tightened"]["steps"] == 0  # type: ignore[index]
    again = ask(gw, "How do I reset my password", "tight", fees)
    assert again.headers["x-cache"] == "semantic"
    bad = gw.http.post("/admin/cache/tightening/reset", json={"model": 3})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "model"


@pytest.fixture(scope="module")
def tenants(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """The tightening gateway of ``tight`` with two tenants, ``a`` and ``b`` (keys ``key-a``,
    ``key-b``), and an admin key, which its client sends unless a request names another."""
    text = config_text(upstream_server.url, tmp_path_factory.mktemp("tenants"),
                       auto_tighten=True, max_wrong_rate=0.5)  # fmt: skip
    config = yaml.safe_load(text)
    config["auth"] = {"keys": [{"key": "key-a", "tenant": "a"}, {"key": "key-b", "tenant": "b"}]}
    config["admin"] = {"api_key": "adm"}
    with Gateway(load_config_text(yaml.safe_dump(config))) as gateway:
        gateway.http.headers["authorization"] = "Bearer adm"
        yield gateway


def test_one_tenants_wrong_hits_tighten_only_its_own_scope(
    tenants: Gateway, upstream: FakeUpstream
) -> None:
    """Tenants never share a cached answer, so one tenant's wrong hits say nothing of
    another's: its audits tighten its own scope, even under the same model and namespace, and
    the operator resets one tenant's scope without touching the other's."""
    gw = tenants
    a, b = ({"headers": {"authorization": f"Bearer key-{t}"}} for t in "ab")
    fees = {"contents": [f"The fee is {10 * (i + 1)} dollars." for i in range(80)]}
    calm = {"content": "Open the login page and click 'Forgot password'."}
    assert ask(gw, STORED, "shared", fees, **a).headers["x-cache"] == "miss"
    assert ask(gw, STORED, "shared", calm, **b).headers["x-cache"] == "miss"
    served = 0
    for _ in range(60):  # tenant a's wrong hits, until its threshold stops them
        if ask(gw, PARAPHRASE, "shared", fees, **a).headers["x-cache"] != "semantic":
            break
        served += 1
        settled(gw, "shared", served)  # (b has no audit yet: the only row is a's)
    else:
        raise AssertionError("the wrong hits never stopped")
    # tenant b, same model, same namespace: still served at the configured threshold
    assert ask(gw, PARAPHRASE, "shared", calm, **b).headers["x-cache"] == "semantic"
    row_b = settled(gw, "shared", 1, tenant="b")
    assert (row_b["audits"], row_b["wrong"], row_b["tightened"]["steps"]) == (1, 0, 0)
    row_a = estimate(gw, "shared", tenant="a")
    assert row_a is not None and row_a["wrong"] == served
    assert row_a["tightened"]["steps"] == served // 4 >= 1
    # a misspelt field is refused, not read as "every scope" (it would undo a's step)
    typo = gw.http.post("/admin/cache/tightening/reset", json={"tennant": "b"})
    assert typo.status_code == 400 and typo.json()["error"]["param"] == "tennant"
    assert estimate(gw, "shared", tenant="a")["tightened"]["steps"] >= 1  # type: ignore[index]
    # the reset names a tenant: b's leaves a's scope tightened, a's undoes it
    reset = gw.http.post("/admin/cache/tightening/reset", json={"tenant": "b"})
    assert reset.status_code == 200 and reset.json() == {"reset": 1}
    assert estimate(gw, "shared", tenant="a")["tightened"]["steps"] >= 1  # type: ignore[index]
    reset = gw.http.post(
        "/admin/cache/tightening/reset", json={"tenant": "a", "model": "fake-model"}
    )
    assert reset.json() == {"reset": 1}
    assert estimate(gw, "shared", tenant="a")["tightened"]["steps"] == 0  # type: ignore[index]
    again = ask(gw, "How do I reset my password", "shared", fees, **a)
    assert again.headers["x-cache"] == "semantic"
    bad = gw.http.post("/admin/cache/tightening/reset", json={"tenant": 1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tenant"


def test_hits_served_under_a_requests_own_threshold_do_not_tighten_the_scope(
    tight: Gateway, upstream: FakeUpstream
) -> None:
    """x-cache-threshold widens (or narrows) one request's match: its audits count in the
    estimate but say nothing of the configured threshold, so they never tighten it."""
    gw = tight
    fees = {"contents": [f"The fee is {10 * (i + 1)} dollars." for i in range(20)]}
    own = {"headers": {"x-cache-threshold": "0.6"}}
    assert ask(gw, STORED, "widened", fees, **own).headers["x-cache"] == "miss"
    for served in range(1, 9):  # two windows of wrong audits
        assert ask(gw, PARAPHRASE, "widened", fees, **own).headers["x-cache"] == "semantic"
        row = settled(gw, "widened", served)
    assert row["wrong"] == 8 and row["tightened"]["steps"] == 0


def test_the_reset_route_says_when_auto_tighten_is_off(gw: Gateway) -> None:
    response = gw.http.post("/admin/cache/tightening/reset", json={})
    assert response.status_code == 400
    assert "auto_tighten" in response.json()["error"]["message"]


class _Scripted(Audit):
    """Judges a served answer "WRONG" wrong, any other ok (the fresh answer is not looked at)."""

    async def judge(self, served: str, fresh: str, **_: Any) -> Verdict:
        return "wrong" if served == "WRONG" else "ok"


class _Text:
    def complete(self, request: Any, body: dict[str, Any]) -> bool:
        return True

    def text(self, body: dict[str, Any]) -> str:
        return str(body["t"])


def test_an_audit_that_ends_after_a_step_counts_in_the_estimate_not_the_new_window() -> None:
    """Two hits served at the configured threshold are audited at once: the first wrong
    verdict fails the window and steps the scope up; the second, as wrong and as old, ends
    after the step. It is counted in the estimate, but the new threshold's window is left to
    the hits served under it, which are all right here: no second step."""
    calibration = Calibration((0.5, 0.6, 0.7), (0.2, 0.1, 0.05), (1.0, 0.9, 0.8))
    cache = SimpleNamespace(verifier=SimpleNamespace(calibration=calibration),
                            score_threshold=0.5, embedder=None)  # fmt: skip
    request = cast(GatewayRequest, SimpleNamespace(
        tenant="acme", model="m", control=SimpleNamespace(namespace="ns", threshold=None)
    ))  # fmt: skip
    tightening = Tightening(bound=0.5)  # windows of 4
    auditor = Auditor(_Scripted(1.0), cast(Any, cache), Metrics(), cast(Any, SimpleNamespace(
        record_audit=lambda *_: None)), max_concurrency=8, tightening=tightening)  # fmt: skip
    scope = audit_scope(request)

    def job(served: str, gate: asyncio.Event) -> AuditJob:
        async def ask() -> Answer:
            await gate.wait()
            return Answer({"t": "fresh"})

        generation = auditor.tightened(request).generation  # as the lookup reads it
        return AuditJob(request, cast(Any, _Text()), {"t": served}, ask, "acme", generation)

    async def audited(*jobs: AuditJob) -> None:
        assert all(auditor.submit(j) for j in jobs)
        await asyncio.gather(*auditor._tasks)

    async def scenario() -> None:
        now = asyncio.Event()
        now.set()
        await audited(*(job("OK", now) for _ in range(3)))
        first, second = asyncio.Event(), asyncio.Event()
        late = job("WRONG", second)  # served before the step, audited after it
        assert auditor.submit(job("WRONG", first)) and auditor.submit(late)
        first.set()
        while tightening.state(scope)["steps"] == 0:
            await asyncio.sleep(0.001)
        assert auditor.tightened(request).threshold == 0.6
        second.set()
        await asyncio.gather(*auditor._tasks)
        assert tightening.state(scope)["window"] == [0, 4]  # the late verdict is not in it
        await audited(*(job("OK", now) for _ in range(4)))
        await auditor.close()

    asyncio.run(scenario())
    assert tightening.state(scope) == {"steps": 1, "score_threshold": 0.6, "window": [0, 4]}
    assert auditor.audit.estimate(scope).wrong == 2 and auditor.audit.estimate(scope).audits == 9


def test_a_tightened_scope_whose_estimate_was_dropped_still_shows_in_the_stats(
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_SCOPES the least recently updated estimate goes, but a tightened threshold is
    never forgotten: its scope keeps a row in /admin/stats (and so on the dashboard and in
    `cachegate stats`), or the operator could not see why it gets no semantic hits."""
    monkeypatch.setattr(audit_module, "MAX_SCOPES", 1)
    text = config_text(upstream_server.url, tmp_path, auto_tighten=True, max_wrong_rate=0.5)
    with Gateway(load_config_text(text)) as gw:
        fees = {"contents": [f"The fee is {10 * (i + 1)} dollars." for i in range(80)]}
        calm = {"content": "Open the login page and click 'Forgot password'."}
        assert ask(gw, STORED, "victim", fees).headers["x-cache"] == "miss"
        assert ask(gw, STORED, "other", calm).headers["x-cache"] == "miss"
        served = 0
        while ask(gw, PARAPHRASE, "victim", fees).headers["x-cache"] == "semantic":
            served += 1
            settled(gw, "victim", served)
            assert served < 60, "the wrong hits never stopped"
        steps = served // 4
        assert ask(gw, PARAPHRASE, "other", calm).headers["x-cache"] == "semantic"
        settled(gw, "other", 1)  # the only estimate held now: the victim's went
        row = estimate(gw, "victim")
        assert row is not None, "the tightened scope vanished from /admin/stats"
        assert (row["audits"], row["wrong"]) == (0, 0)  # its estimate was dropped
        assert row["tightened"]["steps"] == steps >= 1
        # still in force: another paraphrase, one that scores below PARAPHRASE against both
        # entries the victim holds now (STORED, and PARAPHRASE's own fresh answer), misses
        # there too, and hits in the scope that was never tightened
        other = "How should I reset my password?"
        assert ask(gw, other, "victim", fees).headers["x-cache"] == "miss"
        assert ask(gw, other, "other", calm).headers["x-cache"] == "semantic"
