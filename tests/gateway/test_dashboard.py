"""The dashboard in a real browser (Debian's chromium, headless, driven over CDP)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import Browser
from tests.fake_upstream import FakeUpstream, ThreadedServer

#: Set to a path (docs/dashboard.png) to keep the screenshot the test takes.
SCREENSHOT = os.environ.get("CACHEGATE_SCREENSHOT")
#: Picks a value of the dashboard's filter as a user does (a change event).
FILTER = "(s => { s.value = '%s'; s.dispatchEvent(new Event('change')); })(document.getElementById('filter'))"


def test_dashboard_in_a_browser(make_gateway: Any, upstream: FakeUpstream, tmp_path: Path) -> None:
    gw = make_gateway(
        "admin: {api_key: adm, show_text: true, history_interval: 1}\n"
        "prices: {fake-model: {input: 2.5, cached_input: 1.25, output: 10}}\n"
        "cache: {semantic: {audit_rate: 1.0}}",
        semantic=True,
    )
    auth = {"authorization": "Bearer adm"}
    assert gw.chat("How do I reset my password?").headers["x-cache"] == "miss"
    assert gw.chat("How do I reset my password?").headers["x-cache"] == "exact"
    hit = gw.chat("How can I reset my password?")
    assert hit.headers["x-cache"] == "semantic"
    time.sleep(1.1)  # (the next answers land in the history's next point: a line, not a dot)
    gw.chat("What is the capital of France?", stream=True)
    gw.chat("What is the capital of France?", stream=True)
    travel = {"x-cache-namespace": "travel:eu"}  # (a name with ":" in the filter's value)
    gw.chat("Is it cheaper to fly on a Tuesday?", headers=travel)
    rejected = gw.chat("Is it cheaper to fly on a Wednesday?", headers=travel)
    assert rejected.headers["x-cache"] == "miss"
    time.sleep(1.1)
    gw.chat("How can I reset my password?")
    assert gw.http.get("/admin/history", headers=auth).json()["recent_hits"]
    # both semantic hits were audited (in the background: wait for it)
    deadline = time.monotonic() + 120
    while _audited(gw, auth) < 2:
        assert time.monotonic() < deadline, "the audits did not end"
        time.sleep(0.05)

    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard?key=adm")
        page.wait_for("document.querySelector('#hits table') !== null")
        # the semantic hit this test made, with both questions side by side
        row = page.evaluate("document.querySelector('#hits table tr:nth-child(2)').innerText")
        assert "How can I reset my password?" in row and "How do I reset my password?" in row
        assert hit.headers["x-cache-similarity"] in row
        # charts have data: a drawn line in the tier and latency charts, ledger rows
        for chart in ("chart-tiers", "chart-latency", "chart-saved"):
            page.wait_for(f"document.querySelectorAll('#{chart} path').length > 0")
        legend = page.evaluate("document.getElementById('legend-tiers').innerText")
        assert "semantic" in legend and "miss" in legend
        ledger = page.evaluate("document.getElementById('ledger').innerText")
        assert "fake-model" in ledger and "default" in ledger
        assert (
            "4 ($0.0" in ledger
        )  # the two audits' calls and their controls', on a line of their own
        cards = page.evaluate("document.getElementById('cards').innerText")
        assert "hit rate" in cards and "%" in cards
        # the audit panel: the fake upstream's fresh answers carry another serial number, its
        # controls' answers too (every control wrong: the judge can tell nothing, [0, 1])
        audit = page.evaluate("document.querySelector('#audit table tr:nth-child(2)').innerText")
        # (the rate is no estimate then: "unknown", where "100.00 %" headlined it)
        assert audit.split("\t")[:8] == ["default", "fake-model", '""', "2", "2", "2 of 2",
                                          "unknown", "0.00 % – 100.00 %"]  # fmt: skip
        # the filter: one namespace's answers only (its two misses)
        page.evaluate(FILTER % "ns:travel:eu")
        page.wait_for("!document.getElementById('legend-tiers').innerText.includes('semantic')")
        assert page.evaluate("document.getElementById('legend-tiers').innerText").split() == [
            "miss"
        ]
        page.evaluate(FILTER % "")
        page.wait_for("document.getElementById('legend-tiers').innerText.includes('semantic')")
        page.screenshot(tmp_path / "dashboard.png")
        assert page.errors == []
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    if SCREENSHOT:
        shutil.copy(tmp_path / "dashboard.png", SCREENSHOT)


def _audited(gw: Any, auth: dict[str, str]) -> int:
    stats = gw.http.get("/admin/stats", headers=auth).json()
    return sum(row["audits"] for row in stats["cache"]["audit"]["estimates"])


#: The vertices of a tier's line in the tier chart: True where it is at 0 (the x axis).
AT_ZERO = """(() => {
  const svg = document.getElementById('chart-tiers'), zero = svg.viewBox.baseVal.height - 20;
  const d = svg.querySelector('path[stroke="%s"]').getAttribute('d');
  return d.slice(1).split('L').map(v => Math.abs(+v.split(',')[1] - zero) < 0.5);
})()"""


def test_dashboard_draws_a_quiet_time_as_zero(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Intervals without an answer have no point in the history: the tier chart drops to 0
    there, instead of drawing a line across the quiet time as if the traffic had gone on."""
    gw = make_gateway("admin: {history_interval: 1}")
    for i in range(3):
        assert gw.chat(f"before the pause {i}").headers["x-cache"] == "miss"
    time.sleep(3.5)  # (nothing reads the history meanwhile: no point for these intervals)
    for i in range(3):
        assert gw.chat(f"after the pause {i}").headers["x-cache"] == "miss"

    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelector('#chart-tiers path') !== null")
        # the counts are per history interval, which the titles name
        titles = "[...document.querySelectorAll('h2')].map(h => h.innerText).join('|')"
        assert "Answers by tier (per 1 s)|" in page.evaluate(titles)
        assert "|Saved per 1 s|" in page.evaluate(titles)
        at_zero = page.evaluate(AT_ZERO % "#f59e0b")  # the misses' line
        busy = [i for i, zero in enumerate(at_zero) if not zero]
        assert any(at_zero[busy[0] : busy[-1]]), at_zero
        # the misses' latency: a line for each burst, none across the pause
        p50 = "#chart-latency path[stroke='#f59e0b'][stroke-dasharray='']"
        assert page.evaluate(f"document.querySelector(\"{p50}\").getAttribute('d')").count("M") == 2
        # in the legend, p99's swatch is dashed as its line is, and p50's is not (same color)
        swatches = """Object.fromEntries([...document.querySelectorAll('#legend-latency span')]
          .map(s => [s.innerText, getComputedStyle(s.querySelector('i')).borderTopStyle]))"""
        styles = page.evaluate(swatches)
        assert styles["misses p99"] == "dashed" and styles["misses p50"] != "dashed", styles
        # the latency chart shares the tier chart's time axis (its right end: now)
        axis = "[...document.querySelectorAll('#%s text')].slice(-3).map(t => t.textContent)"
        assert page.evaluate(axis % "chart-latency") == page.evaluate(axis % "chart-tiers")
        assert page.errors == []


def test_dashboard_with_the_cache_off(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """No response cache: its panel says so rather than counting 0 lookups and 0 stores."""
    gw = make_gateway("cache: {enabled: false}")
    assert gw.chat("hello").headers["x-cache"] == "bypass"
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.getElementById('ledger').innerText.includes('fake-model')")
        assert page.evaluate("document.getElementById('cache').innerText") == "response cache off"
        cards = page.evaluate("document.getElementById('cards').innerText")
        assert "off\ncached answers" in cards and "0.0 %\nhit rate" in cards
        assert page.errors == []


def test_dashboard_time_labels_fit_their_chart(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The time axis' last label (now) is drawn whole, not cut at the chart's right edge."""
    gw = make_gateway()
    gw.chat("hello")
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelector('#chart-tiers path') !== null")
        overflow = """[...document.querySelectorAll('svg.chart')].flatMap(svg => [...svg.querySelectorAll('text')]
          .map(t => t.getBBox()).filter(b => b.x < 0 || b.x + b.width > svg.viewBox.baseVal.width)
          .map(b => [svg.id, b.x, b.width]))"""
        assert page.evaluate(overflow) == []
        # the counts' axes (answers, tokens) are labelled with whole numbers: no "0.73 answers",
        # nor four "0" labels while nothing was saved
        labels = "[...document.querySelectorAll('#%s text')].slice(0, 4).map(t => t.textContent)"
        assert page.evaluate(labels % "chart-tiers") == ["0", "1", "2", "3"]
        assert page.evaluate(labels % "chart-saved") == ["0", "1", "2", "3"]
        assert page.errors == []


#: The history requests the page made: [url, bytes received].
HISTORY_READS = """performance.getEntriesByType('resource').filter(e => e.name.includes('/admin/history'))
  .map(e => [e.name, e.encodedBodySize])"""


def test_dashboard_reads_only_new_history_points(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """After its first read, the page asks only for the points it lacks (``?since=``): it
    fetched the whole ring (hundreds of KB for an hour of points) every 2 s. What it draws is
    the ring all the same: points the ring dropped go, and so do those of a gateway that
    restarted meanwhile."""
    config = "admin: {history_interval: 1, history_points: 5}"
    gw = make_gateway(config)
    kept = "kept.points.map(p => [p.t, p.tiers])"
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for(f"{HISTORY_READS}.length >= 1")
        for i in range(8):  # (answers in several intervals, past the ring's 5 points)
            assert gw.chat(f"question {i}").headers["x-cache"] == "miss"
            time.sleep(0.5)
        page.wait_for(f"{HISTORY_READS}.length >= 3")
        reads = page.evaluate(HISTORY_READS)
        assert all("?since=" in url for url, _ in reads[1:]), reads
        # what it kept is the ring: the same counts for the same intervals (the current one
        # goes on), and no point the ring dropped
        time.sleep(2.1)
        drawn = dict((t, tiers) for t, tiers in page.evaluate(kept)[:-1])
        ring = gw.http.get("/admin/history").json()
        assert len(drawn) < 5 and min(drawn) >= ring["oldest_t"] - 2.1, (drawn, ring)
        both = [p for p in ring["points"][:-1] if p["t"] in drawn]
        assert len(both) >= 2 and all(drawn[p["t"]] == p["tiers"] for p in both), (drawn, ring)
        # a restart on the same port: the old process' points go
        port = gw.server.port
        gw.stop()
        gw = make_gateway(config, port=port)
        started = gw.http.get("/admin/history").json()["oldest_t"]
        page.wait_for(f"kept.points[0].t >= {started}")
        assert all("ERR_CONNECTION_REFUSED" in e for e in page.errors), page.errors


def test_dashboard_with_long_names(
    make_gateway: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """Tenant, model and namespace names are the operator's and the clients' to pick: a long
    one wraps in its cell, rather than making the page wider than the window (the filter) or
    squeezing the ledger's other names into a column a few letters wide."""
    model, tenant = "a-fine-tuned-model-" * 16, "tenant-" + "x" * 100
    upstream = {"backend": "openai", "base_url": f"{upstream_server.url}/v1", "api_key": "sk"}
    config = {"admin": {"api_key": "adm"}, "auth": {"keys": [{"key": "k1", "tenant": tenant}]}}
    gw = make_gateway(json.dumps(config | {"models": {model: upstream}}))
    key = {"authorization": "Bearer k1"}
    for name in (model, "fake-model"):
        body = {"model": name, "messages": [{"role": "user", "content": "hello"}]}
        namespace = {"x-cache-namespace": "ns-" + "y" * 120}
        reply = gw.http.post("/v1/chat/completions", json=body, headers=key | namespace)
        assert reply.status_code == 200, reply.text
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard?key=adm")
        page.wait_for("document.querySelectorAll('#ledger tr').length === 3")
        width = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        scroll, client = page.evaluate(width)
        assert scroll <= client
        # the ledger's rows are a few lines high (not a name a few letters wide), and its
        # numbers are whole on one line
        rows = "[...document.querySelectorAll('#ledger tr')].map(r => r.getBoundingClientRect().height)"
        assert max(page.evaluate(rows)) < 120, page.evaluate(rows)
        lines = """[...document.querySelectorAll('#ledger td.num')].map(td => {
          const range = document.createRange(); range.selectNodeContents(td);
          return range.getClientRects().length; })"""
        assert set(page.evaluate(lines)) == {1}, page.evaluate(lines)
        # a short name stays whole in a narrow table: the prefix KV one (a local model's row)
        prefix = """(() => {
          table("prefix-table", ["model", "in use / budget~", "hit / queried tokens#", "hit rate#",
            "evictions#", "disk tier~"], [["smollm2", "5.9 MiB / 1.00 GiB", "162 / 276", "58.7 %", 0, "off"]]);
          const range = document.createRange();
          range.selectNodeContents(document.querySelector("#prefix-table td"));
          return range.getClientRects().length; })()"""
        assert page.evaluate(prefix) == 1
        assert page.errors == []


def test_dashboard_prefix_table_fits_its_panel(no_system_gateway: Any, tmp_path: Path) -> None:
    """A local model's prefix KV row stays inside its panel: its columns of a few short words
    ("336 KiB / 16.0 MiB", "0 tokens served, 0 files") wrap at their spaces. (With the floor
    that keeps names whole on every text column, the table was 474 px wide in a 436 px panel
    at this window's width, drawn over the gap beside it.)"""
    gw = no_system_gateway
    answer = gw.chat("hello", model="tiny", max_tokens=2)
    assert answer.status_code == 200, answer.text
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelector('#prefix-table table') !== null")
        fits = """(() => { const t = document.querySelector('#prefix-table table');
          const panel = t.closest('section').getBoundingClientRect();
          return [t.getBoundingClientRect().right, panel.right]; })()"""
        right, panel = page.evaluate(fits)
        assert right <= panel, (right, panel)
        row = page.evaluate("document.querySelector('#prefix-table tr:nth-child(2)').innerText")
        assert row.split("\t")[0] == "tiny" and "/ 1.00 GiB" in row, row  # (its budget)
        model = """(() => { const range = document.createRange();
          range.selectNodeContents(document.querySelector('#prefix-table td'));
          return range.getClientRects().length; })()"""
        assert page.evaluate(model) == 1  # (a name stays whole)
        assert page.errors == []


def test_dashboard_shows_errors(make_gateway: Any, upstream: FakeUpstream, tmp_path: Path) -> None:
    """Failed answers (an upstream down: 502) are drawn apart in the tier chart: the history
    counts them, and the page showed them nowhere (as a bypass among the others, at best)."""
    gw = make_gateway()
    assert gw.chat("hello").status_code == 200
    for _ in range(3):
        assert gw.chat("boom", fake={"status": 500}).status_code == 502
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelector('#chart-tiers path') !== null")
        assert "errors" in page.evaluate("document.getElementById('legend-tiers').innerText")
        drawn = "document.querySelectorAll('#chart-tiers path[stroke=\"#dc2626\"]').length"
        assert page.evaluate(drawn) == 1
        # one model's answers: the history does not count errors by model
        page.evaluate(FILTER % "model:fake-model")
        page.wait_for("!document.getElementById('legend-tiers').innerText.includes('errors')")
        assert page.errors == []


def test_dashboard_says_when_the_gateway_does_not_answer(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A gateway that stops answering (its event loop stuck) is an error on the page, not old
    numbers under an old "updated" time."""
    gw = make_gateway()
    gw.chat("hello")
    runtime, release = gw.app.state.runtime, threading.Event()
    stats = runtime.stats
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.getElementById('updated').innerText.startsWith('updated')")
        runtime.stats = lambda: release.wait(60) and stats()  # (the loop waits: stuck)
        try:
            page.wait_for("document.getElementById('err').innerText.includes('no answer')", 20)
            assert "/admin/stats: no answer in 10 s" in page.evaluate(
                "document.getElementById('err').innerText"
            )
        finally:
            release.set()
        page.wait_for("document.getElementById('err').innerText === ''")  # (answering again)


def test_dashboard_behind_a_proxy_under_a_path_prefix(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A reverse proxy that serves the gateway under a prefix (``/cachegate/dashboard``): the
    page read ``/admin/stats`` and ``/admin/history`` at the site's root, which the proxy does
    not pass on (404), and showed nothing but "stats unavailable"."""
    gw = make_gateway("admin: {api_key: adm}")
    assert gw.chat("hello").status_code == 200

    def strip(path: str) -> str | None:  # (only what is under the prefix reaches the gateway)
        return gw.url + path.removeprefix("/cachegate") if path.startswith("/cachegate/") else None

    with _proxy(strip) as proxy, Browser(tmp_path) as browser:
        for page_path in ("/cachegate/dashboard", "/cachegate/dashboard/"):
            page = browser.open(f"{proxy}{page_path}?key=adm")
            page.wait_for("document.getElementById('ledger').innerText.includes('fake-model')")
            assert page.evaluate("document.getElementById('err').innerText") == ""
            reads = page.evaluate(HISTORY_READS)
            assert reads and all(url.startswith(f"{proxy}/cachegate/admin/") for url, _ in reads)
            assert page.errors == []


def test_dashboard_hit_rate_leaves_client_errors_out(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Requests a client got wrong (an unknown model, a malformed body) are errors, neither
    hits nor misses: counted as "bypass", they pulled the hit rate down (1 hit in 2 answers
    read 25 % with two such mistakes)."""
    gw = make_gateway()
    assert gw.chat("hello").headers["x-cache"] == "miss"
    assert gw.chat("hello").headers["x-cache"] == "exact"
    assert gw.chat("hello", model="no-such-model").status_code == 404
    assert gw.chat("hello", temperature="hot").status_code == 400
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelector('#chart-tiers path') !== null")
        cards = page.evaluate("document.getElementById('cards').innerText")
        assert "50.0 %\nhit rate" in cards, cards
        # the two mistakes are on the errors' line, and in no tier's
        legend = page.evaluate("document.getElementById('legend-tiers').innerText").split("\n")
        assert sorted(legend) == ["errors (4xx, 5xx)", "exact", "miss"], legend
        assert page.errors == []


def test_dashboard_in_a_narrow_window_scrolls_its_tables_not_the_page(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """At 700 px the ledger, hits and rejections tables were wider than their panels: they
    spilled past them and the whole page scrolled sideways (a review). Each now scrolls in its
    panel."""
    gw = make_gateway(json.dumps({"prices": {"fake-model": {"input": 2.5, "output": 10}}}),
                      semantic=True)  # fmt: skip
    for question in ("How do I reset my password?", "How can I reset my password?"):
        assert gw.chat(question).status_code == 200
    with Browser(tmp_path, flags=("--window-size=700,1000",)) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for("document.querySelectorAll('#ledger tr').length === 2")
        assert page.evaluate("document.documentElement.clientWidth") <= 700
        width = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        scroll, client = page.evaluate(width)
        assert scroll <= client, (scroll, client)
        spilled = """[...document.querySelectorAll('.panel')].filter(p =>
          p.scrollWidth > p.clientWidth).map(p => p.querySelector('h2')?.innerText)"""
        assert page.evaluate(spilled) == []
        assert page.errors == []


def test_money_under_a_hundredth_of_a_cent_is_not_shown_as_nothing() -> None:
    # "$0.0000" for 2.4e-05 spent read as free (a review); the CLI's figure is the page's
    from gateway.admin_cli import _usd

    assert [_usd(v) for v in (0.0, 2.4e-05, -2.4e-05, 0.00012, -0.5)] == [
        "$0.0000", "<$0.0001", "-<$0.0001", "$0.0001", "-$0.5000"
    ]  # fmt: skip


def test_dashboard_says_when_a_model_has_no_price(
    make_gateway: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """A model without a price is counted at $0: the ledger showed "$0.0000" spent and saved,
    which reads as free. Its money is unknown ("—", with the reason as a tooltip); a priced
    model's figures stay."""
    other = {"backend": "openai", "base_url": f"{upstream_server.url}/v1", "api_key": "sk"}
    config = {"prices": {"fake-model": {"input": 2.5, "output": 10}}, "models": {"other": other}}
    priced = make_gateway(json.dumps(config))
    unpriced = make_gateway()
    for gw in (priced, unpriced):
        for model in ("fake-model", "other") if gw is priced else ("fake-model",):
            for _ in range(2):  # (a miss, then an exact hit: spent, then saved)
                assert gw.chat("hello", model=model).status_code == 200
    cells = """Object.fromEntries([...document.querySelectorAll('#ledger tr')].slice(1).map(r =>
      [r.cells[1].innerText, [...r.cells].slice(-3).map(c => [c.innerText, c.title])]))"""
    card = """[...document.querySelectorAll('#cards .card')].filter(c => c.innerText.includes('USD'))
      .map(c => [c.querySelector('b').innerText, c.title])[0]"""
    with Browser(tmp_path) as browser:
        page = browser.open(f"{priced.url}/dashboard")
        page.wait_for("document.querySelectorAll('#ledger tr').length === 3")
        rows = page.evaluate(cells)
        assert [text for text, _ in rows["fake-model"]] == ["$0.0001", "0 ($0.0000)", "$0.0001"]
        assert rows["other"] == [["—", UNPRICED], ["0 (—)", UNPRICED], ["—", UNPRICED]], rows
        assert page.evaluate(card) == ["$0.0001", ""]  # (the priced model's)
        page = browser.open(f"{unpriced.url}/dashboard")
        page.wait_for("document.querySelectorAll('#ledger tr').length === 2")
        assert page.evaluate(cells)["fake-model"][0] == ["—", UNPRICED]
        assert page.evaluate(card)[0] == "—"
        assert page.errors == []


#: The tooltip of a model's money when it has no price.
UNPRICED = "no price set for this model (prices: in the config)"


def test_dashboard_behind_a_load_balancer_follows_one_replica(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replicas behind one load balancer each keep their own history: each read of the page
    could reach another, and its charts and ledger jumped from one replica's numbers to the
    other's at every refresh (and merged their points). It follows one replica, says which,
    and leaves out what another answered; a restart of that one (a new pid) is followed at once."""
    config = "admin: {history_interval: 1}"

    def replica(host: str, **kwargs: Any) -> Any:  # (the id is the host name and the pid)
        monkeypatch.setattr(socket, "gethostname", lambda: host)
        return make_gateway(config, **kwargs)

    a, b = replica("host-a"), replica("host-b")
    for gw, n in ((a, 2), (b, 5)):
        for i in range(n):
            assert gw.chat(f"question {i}").headers["x-cache"] == "miss"
    assert a.http.get("/admin/stats").json()["replica"] == f"host-a:{os.getpid()}"
    assert b.http.get("/admin/history").json()["replica"] == f"host-b:{os.getpid()}"
    urls, reads = [a.url, b.url], iter(range(1_000_000))

    def balance(path: str) -> str:  # (each history read reaches the other replica)
        return urls[next(reads) % 2 if path.startswith("/admin/history") else 0] + path

    requests = "document.querySelector('#ledger tr:nth-child(2) td:nth-child(3)')?.innerText"
    shown = "document.getElementById('replica').innerText"
    with _proxy(balance) as proxy, Browser(tmp_path) as browser:
        page = browser.open(f"{proxy}/dashboard")
        page.wait_for(f"{requests} !== undefined")
        seen, deadline = set(), time.monotonic() + 9  # (4 reads: 2 of each replica)
        while time.monotonic() < deadline:
            seen.add(page.evaluate(requests))
            time.sleep(0.1)
        assert seen == {"2"}, seen  # replica a's: b's 5 never drawn
        misses = "kept.points.reduce((n, p) => n + (p.tiers.miss || 0), 0)"
        assert page.evaluate(misses) == 2
        assert page.evaluate(shown).startswith("· replica host-a:"), page.evaluate(shown)
        # replica a restarts (another process: another name): the page follows it at once,
        # rather than leaving out its reads for a minute as those of another replica
        port = a.server.port
        a.stop()
        a = replica("host-a2", port=port)
        a.chat("after the restart")
        page.wait_for(f"{shown}.startsWith('· replica host-a2:')", 10)
        page.wait_for(f"{requests} === '1'", 10)
        assert all("502" in e for e in page.errors), page.errors


def test_dashboard_keeps_its_replica_when_another_one_restarts(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another replica restarting (a rolling deploy) is not the followed one restarting: the
    page jumped to it, and to its empty history, when it had started in the history interval
    of the followed replica's last point, though the followed one answered after it started."""
    config = "admin: {history_interval: 3600}"

    def replica(host: str, **kwargs: Any) -> Any:
        monkeypatch.setattr(socket, "gethostname", lambda: host)
        return make_gateway(config, **kwargs)

    a, b = replica("host-a"), replica("host-b")
    for i in range(2):
        assert a.chat(f"question {i}").headers["x-cache"] == "miss"
    reads = {"history": a.url}

    def balance(path: str) -> str:
        return (reads["history"] if path.startswith("/admin/history") else a.url) + path

    shown = "document.getElementById('replica').innerText"
    while time.time() % 3600 > 3540:  # (b restarts in the interval of a's point read next)
        time.sleep(1)
    with _proxy(balance) as proxy, Browser(tmp_path) as browser:
        page = browser.open(f"{proxy}/dashboard")
        page.wait_for(f"{shown}.startsWith('· replica host-a:')")
        port = b.server.port
        b.stop()
        b = replica("host-b2", port=port)
        time.sleep(4.5)  # (replica a answers the page's reads after b restarted)
        reads["history"] = b.url
        page.wait_for(f"{shown}.includes('host-b2')", 10)
        assert page.evaluate(shown).startswith("· replica host-a:"), page.evaluate(shown)
        assert page.evaluate("kept.points.reduce((n, p) => n + (p.tiers.miss || 0), 0)") == 2
        assert page.errors == []


@contextmanager
def _proxy(route: Callable[[str], str | None]) -> Iterator[str]:
    """A reverse proxy on 127.0.0.1 for GET requests: ``route(path)`` is the URL it reads for
    a path (None: 404). Yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = route(self.path)
            if url is None:
                self.send_error(404)
                return
            auth = {k: v for k, v in self.headers.items() if k.lower() == "authorization"}
            try:
                reply = httpx.get(url, headers=auth, timeout=30)
            except httpx.HTTPError:  # (a gateway restarting)
                self.send_error(502)
                return
            self.send_response(reply.status_code)
            self.send_header("content-type", reply.headers.get("content-type", "text/plain"))
            self.send_header("content-length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_filter_lists_the_kept_historys_names_only(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """After the followed gateway restarted, the filter still listed the old process's models
    and namespaces (options were only ever added; a review). It lists the kept history's, and
    the one chosen, which stays chosen."""
    gw = make_gateway()
    assert gw.chat("hello").status_code == 200
    options = "[...document.getElementById('filter').options].map(o => o.value)"
    with Browser(tmp_path) as browser:
        page = browser.open(f"{gw.url}/dashboard")
        page.wait_for(f"{options}.includes('model:fake-model')")

        def after(choose: str, model: str, namespaces: str) -> Any:
            # (one script: the page's own refresh cannot run between its steps)
            return page.evaluate(f"""(() => {{
              const select = document.getElementById('filter');
              select.value = {choose!r};
              updateFilter([{{by_model: {{{model!r}: 1}}, by_namespace: {namespaces}}}]);
              return [{options}, select.value]; }})()""")

        assert after("", "old-model", "{sales: 1}") == [["", "model:old-model", "ns:sales"], ""]
        # a restart: the old names go, but the one chosen stays (and stays chosen)
        chosen = after("ns:sales", "new-model", "{}")
        assert chosen == [["", "model:new-model", "ns:sales"], "ns:sales"]
        assert after("", "new-model", "{}") == [["", "model:new-model"], ""]
        assert page.errors == []
