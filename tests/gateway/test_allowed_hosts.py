"""``server.allowed_hosts``: the ``Host`` check against DNS rebinding (docs/security.md).

A page on ``http://evil.example:PORT`` whose name the attacker then points at 127.0.0.1 reaches
a gateway there with ``Origin`` and ``Host`` both ``evil.example:PORT``: the Origin check takes it
for the gateway's own page. Each test sends the headers such a browser sends, over real HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.browser import Browser
from tests.conftest import wait_for
from tests.fake_upstream import FakeUpstream

CHAT = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]})
MESSAGE = json.dumps(
    {"model": "fake-model", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
)
#: The admin routes, each asked as a page would (``GET``; the flush is a ``POST``).
ADMIN = ("/admin/stats", "/admin/cache/entries", "/admin/history", "/metrics", "/dashboard")


def page(gw: Any, name: str, origin: str | None = None) -> dict[str, str]:
    """The headers of a browser's request to the gateway by ``name`` (on its port) from a page
    of ``origin`` (the gateway's own by that name when None), with a body asking no preflight."""
    host = f"{name}:{gw.server.port}"
    return {"host": host, "origin": origin or f"http://{host}", "content-type": "text/plain"}


def stats(gw: Any, name: str, origin: str | None = None) -> httpx.Response:
    """``GET /admin/stats`` as a page of ``origin`` sends it to the gateway by ``name``."""
    return gw.http.get("/admin/stats", headers=page(gw, name, origin))


def refused_for(response: httpx.Response) -> str:
    """The ``code`` of a 403 (the OpenAI error body, Anthropic's on ``/v1/messages``)."""
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["type"] == "permission_error"
    return str(error.get("code") or error["message"])


def test_a_rebound_page_is_refused_on_the_admin_routes_and_a_keyless_api(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    gw = make_gateway()
    gw.chat("What is the capital of Peru?")
    rebound = page(gw, "evil.example")
    flush = gw.http.post("/admin/cache/flush", content=b"{}", headers=rebound)
    assert refused_for(flush) == "host_not_allowed"
    assert "'evil.example:" in flush.json()["error"]["message"]
    # a same-origin GET (the page reading the answers, as rebinding lets it) sends no Origin
    only_host = {"host": rebound["host"]}
    for path in ADMIN:
        for headers in (rebound, only_host):
            assert refused_for(gw.http.get(path, headers=headers)) == "host_not_allowed", path
    chat = gw.http.post("/v1/chat/completions", content=CHAT, headers=rebound)
    assert refused_for(chat) == "host_not_allowed"
    assert refused_for(gw.http.get("/v1/models", headers=only_host)) == "host_not_allowed"
    messages = gw.http.post("/v1/messages", content=MESSAGE, headers=rebound)
    assert messages.json()["type"] == "error"  # (Anthropic's body)
    assert "server.allowed_hosts" in refused_for(messages)
    assert upstream.stats["requests"] == 1  # the first question only: no model call
    assert gw.chat("What is the capital of Peru?").headers["x-cache"] == "exact"  # not flushed
    # said once in the log (for an operator who left out a name of the gateway), not per request
    said = [r.getMessage() for r in caplog.records if "server.allowed_hosts" in r.getMessage()]
    assert said == [f"refused a request for host 'evil.example:{gw.server.port}': not in "
                    "server.allowed_hosts"]  # fmt: skip
    # the probes (no tenant's data, no state changed) answer any host, as they answer any origin
    for path in ("/healthz", "/readyz"):
        assert gw.http.get(path, headers=only_host).status_code == 200, path


def test_readyz_tells_a_host_not_allowed_its_status_alone(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A probe names any host and reads the status; a rebound page read the model names and a
    failed load's error (its path) too. An allowed host still gets the whole body."""
    missing = tmp_path / "no-such-model"
    gw = make_gateway(f"models: {{broken: {{backend: local, source: '{missing}'}}}}", wait=False)
    wait_for(lambda: gw.http.get("/readyz").json()["status"] == "failed", timeout=120)
    for headers in (page(gw, "evil.example"), {"host": "evil.example"}):
        foreign = gw.http.get("/readyz", headers=headers)
        assert foreign.status_code == 503
        assert foreign.json() == {"status": "failed"}
        assert "broken" not in foreign.text and str(missing) not in foreign.text
    own = gw.http.get("/readyz", headers=page(gw, "localhost"))
    assert own.status_code == 503 and own.json()["status"] == "failed"
    assert own.json()["models"] == {"fake-model": True, "broken": False}
    assert str(missing) in own.json()["failed"]["broken"]
    ready = make_gateway()  # (a gateway that is ready: 200 with the status alone)
    foreign = ready.http.get("/readyz", headers={"host": "evil.example"})
    assert foreign.status_code == 200 and foreign.json() == {"status": "ready"}
    assert ready.http.get("/readyz").json()["models"] == {"fake-model": True}
    # on an address where any host is allowed (the default off loopback), the body is whole
    anywhere = make_gateway("server: {host: 0.0.0.0}")
    assert "models" in anywhere.http.get("/readyz", headers={"host": "gw.example"}).json()


#: What a page sends the gateway it was loaded from (its own origin, as the browser sees it): a
#: flush, a model call and a read of the stats, each as ``[status, error code or null]``.
PAGE_REQUESTS = """
(async () => {
  const requests = [
    ["/admin/cache/flush", {method: "POST", body: "{}"}],
    ["/v1/chat/completions", {method: "POST", body: %s}],
    ["/admin/stats", {}],
  ];
  const got = [];
  for (const [path, init] of requests) {
    const response = await fetch(path, init);
    const body = await response.json();
    got.push([response.status, body.error ? body.error.code : null]);
  }
  window.got = got;
})()
"""


def test_a_browser_on_a_rebound_name_is_refused_and_on_localhost_answered(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Chromium with evil.example resolving to 127.0.0.1, where a rebinding leaves it: a page
    loaded from http://evil.example:PORT is, for the browser, of the gateway's own origin."""
    gw = make_gateway()
    gw.chat("What is the capital of Peru?")
    port = gw.server.port
    flags = ("--host-resolver-rules=MAP evil.example 127.0.0.1", "--no-proxy-server")
    with Browser(tmp_path, flags) as browser:
        for name in ("evil.example", "localhost"):
            tab = browser.open(f"http://{name}:{port}/healthz")  # (answers any host)
            tab.wait_for(f"location.host === '{name}:{port}' && document.readyState === 'complete'")
            tab.evaluate(PAGE_REQUESTS % json.dumps(CHAT))
            tab.wait_for("window.got !== undefined")
            if name == "evil.example":
                assert tab.evaluate("window.got") == [[403, "host_not_allowed"]] * 3
                assert upstream.stats["requests"] == 1
                assert gw.chat("What is the capital of Peru?").headers["x-cache"] == "exact"
            else:
                assert tab.evaluate("window.got") == [[200, None]] * 3


def test_the_api_of_a_gateway_with_keys_does_not_check_the_host(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """As the Origin check: a page cannot know a key. The admin routes are checked still."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}]}\nadmin: {api_key: the-admin}")
    rebound = page(gw, "evil.example")
    keyed = gw.chat("Hi", headers={**rebound, "authorization": "Bearer key-a"})
    assert keyed.status_code == 200
    assert gw.chat("Hi", headers=rebound).status_code == 401
    admin = gw.http.get("/admin/stats", headers={**rebound, "authorization": "Bearer the-admin"})
    assert refused_for(admin) == "host_not_allowed"


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "[::1]", "LocalHost", "localhost."])
def test_a_gateway_on_loopback_answers_its_own_names(
    make_gateway: Any, upstream: FakeUpstream, name: str
) -> None:
    gw = make_gateway()
    own = page(gw, name)
    assert gw.http.post("/v1/chat/completions", content=CHAT, headers=own).status_code == 200
    assert gw.http.post("/admin/cache/flush", content=b"{}", headers=own).json()["flushed"] == 1


def test_a_page_on_another_name_of_the_gateway_is_its_own_on_its_port(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The dashboard opened as http://localhost:PORT calling http://127.0.0.1:PORT: both names
    are the gateway's (allowed hosts). On another port it is another site's page."""
    gw = make_gateway()
    port = gw.server.port
    for origin in (f"http://localhost:{port}", f"http://[::1]:{port}"):
        assert stats(gw, "127.0.0.1", origin).status_code == 200, origin
    for origin in (f"http://localhost:{port + 1}", f"http://localhost.evil.example:{port}"):
        assert refused_for(stats(gw, "127.0.0.1", origin)) == "cross_origin"


def test_the_openai_sdk_by_localhost_is_answered_and_by_another_name_refused(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    client = openai.OpenAI(base_url=f"http://localhost:{gw.server.port}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "Hi"}]
    )
    assert answer.choices[0].message.content
    rebound = openai.OpenAI(
        base_url=f"{gw.url}/v1",
        api_key="unused",
        default_headers={"host": f"evil.example:{gw.server.port}"},
        max_retries=0,
    )
    with pytest.raises(openai.PermissionDeniedError) as refused:
        rebound.models.list()
    assert refused.value.code == "host_not_allowed"


def test_a_wildcard_answers_any_host_but_not_a_page_of_another_origin(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("server: {allowed_hosts: ['*']}")
    assert stats(gw, "gw.example").status_code == 200
    own = page(gw, "gw.example")
    assert gw.http.post("/v1/chat/completions", content=CHAT, headers=own).status_code == 200
    port = gw.server.port
    # "*" names no host by itself: another host's page is another site's, on the same port too
    for origin in (f"http://other.example:{port}", f"http://localhost:{port}"):
        assert refused_for(stats(gw, "gw.example", origin)) == "cross_origin"


def test_a_leading_dot_allows_a_domain_and_its_subdomains(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("server: {allowed_hosts: [.corp.example, gw.example, '[::1]']}")
    allowed = ["corp.example", "api.corp.example", "a.b.corp.example", "GW.Example", "[::1]"]
    # (the list replaces the loopback names; gw.example is that name alone)
    refused = ["evilcorp.example", "corp.example.evil.com", "sub.gw.example", "127.0.0.1"]
    for name in allowed + refused:
        assert stats(gw, name).status_code == (200 if name in allowed else 403), name
    port = gw.server.port
    # a page on the name listed alone is the gateway's own; one of the domain's hosts is not
    assert stats(gw, "api.corp.example", f"http://gw.example:{port}").status_code == 200
    other = stats(gw, "gw.example", f"http://api.corp.example:{port}")
    assert refused_for(other) == "cross_origin"


def test_a_gateway_on_another_address_answers_any_host_by_default(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A gateway bound to 0.0.0.0 (a container) is reached by names it cannot know: existing
    deployments keep working. (The server here listens on 127.0.0.1; the check reads the
    configured address, as ``cachegate serve`` binds it: tests/e2e/test_allowed_hosts.py.)"""
    gw = make_gateway("server: {host: 0.0.0.0}")
    assert stats(gw, "gw.example").status_code == 200
    named = page(gw, "gw.example")
    assert gw.http.post("/v1/chat/completions", content=CHAT, headers=named).status_code == 200
    assert refused_for(stats(gw, "gw.example", "http://evil.example")) == "cross_origin"


def test_a_gateway_on_another_loopback_address_answers_it_too(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("server: {host: 127.0.0.2}")
    assert stats(gw, "127.0.0.2").status_code == 200
    assert refused_for(stats(gw, "evil.example")) == "host_not_allowed"
