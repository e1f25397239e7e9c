"""The semantic tier's cost on a miss, and overload: ``server.admission_max_lag_ms`` and
``cache.semantic.max_wait_ms``.

    python -m bench.overload                 # ~6 min; bench/results/overload.json + docs section
    python -m bench.overload --seconds 20    # shorter overload runs
    python -m bench.overload --misses 0 --seconds 20 --no-doc   # part 2 only, quick

Processes on 127.0.0.1: the fake upstream, one ``cachegate serve`` per configuration, and the
load generator. Part 1 (miss cost): fresh questions one at a time (from this process) and
from 16 connections at once (wrk with ``--client wrk``: a Python client here tops out below
what the gateway serves), to gateways with the semantic tier on (one per ``--backends``
embedder backend) and one with it off, in alternating rounds (same machine load).
Part 2 (overload): 200 connections for ``--seconds`` from wrk (``--client wrk``, Debian's
package, with bench/overload.lua; ``--client python``: httpx in this process), 70% of requests
repeat a stored question (exact hits), 30% ask a fresh one (misses, the upstream takes 0.2 s),
against gateways with admission off and on (``--admission``) and the given ``max_wait_ms``
values (``--waits``); errors, hit rate, miss and hit latency, the semantic lookups skipped for
overload, and the CPU each process used (on a small shared machine the load generator and the
fake upstream compete with the gateway for the same cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.report import (
    CACHEGATE,
    command,
    cpu_seconds,
    free_port,
    percentile,
    publish,
    run_header,
    running,
    table,
)

UPSTREAM_DELAY = 0.2  # seconds a fresh answer takes in part 2 (a model call)
_serial = itertools.count()


@contextlib.contextmanager
def gateways(
    semantic: dict[str, dict[str, Any] | None], admission: str = "null"
) -> Iterator[tuple[dict[str, str], dict[str, int]]]:
    """The fake upstream and one gateway per ``name -> cache.semantic`` (None: semantic off):
    their URLs and process ids (the upstream's under ``"upstream"``). ``admission``: their
    ``server.admission_max_lag_ms``."""
    up_port = free_port()
    up = f"http://127.0.0.1:{up_port}"
    urls = {name: f"http://127.0.0.1:{free_port()}" for name in semantic}
    with tempfile.TemporaryDirectory() as tmp:
        procs = [([sys.executable, "-m", "tests.fake_upstream", "--port", str(up_port)],
                  f"{up}/_stats")]  # fmt: skip
        for name, settings in semantic.items():
            sem = "{enabled: false}" if settings is None else _flow({"enabled": True, **settings})
            config = Path(tmp) / f"{name}.yaml"
            config.write_text(
                f"data_dir: {tmp}/{name}\n"
                f"server: {{log_level: warning, admission_max_lag_ms: {admission}}}\n"
                f"cache: {{semantic: {sem}}}\nmodels:\n"
                f"  fake-model: {{backend: openai, base_url: '{up}/v1', api_key: sk}}\n"
            )
            port = urls[name].rsplit(":", 1)[1]
            procs.append(([CACHEGATE, "serve", "--config", str(config), "--port", port],
                          f"{urls[name]}/readyz"))  # fmt: skip
        with running(procs, ready_timeout=180, stop_timeout=20) as started:
            pids = dict(zip(["upstream", *urls], (p.pid for p in started), strict=True))
            yield urls, pids


async def ask(
    client: httpx.AsyncClient, url: str, question: str, delay: float = 0.0, namespace: str = ""
) -> Any:
    body: dict[str, Any] = {"model": "fake-model",
                            "messages": [{"role": "user", "content": question}]}  # fmt: skip
    if delay:
        body["fake"] = {"delay": delay}
    headers = {"x-cache-namespace": namespace} if namespace else {}
    started = time.perf_counter()
    try:
        r = await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)
        cache = r.headers.get("x-cache", "") if r.status_code == 200 else f"error {r.status_code}"
    except httpx.HTTPError as exc:
        cache = f"error {type(exc).__name__}"
    return cache, time.perf_counter() - started


def fresh() -> str:
    return f"Fresh question {next(_serial)} about {random.choice(TOPICS)}?"


TOPICS = ["tax returns", "river fishing", "kernel modules", "sourdough", "solar panels",
          "chess openings", "bus timetables", "violin strings", "tide tables", "visa rules"]  # fmt: skip


async def miss_cost(urls: dict[str, str], n: int, client: str = "wrk") -> list[list[Any]]:
    """Misses one at a time (p50) and 16 at once (misses/s), semantic on vs off, alternating.

    ``client``: what sends the 16 at once: "wrk" (16 connections for 5 s, every question
    fresh) or "python" (``n // 2`` requests from httpx in this process).
    """
    lat: dict[str, list[float]] = {name: [] for name in urls}
    rate: dict[str, list[float]] = {name: [] for name in urls}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as http:
        for _round in range(4):
            for name, url in urls.items():
                for _ in range(n // 4):
                    lat[name].append((await ask(http, url, fresh()))[1])
                rate[name].append(await _misses_per_s(http, url, n // 2, client))
    return [[name, len(lat[name]), f"{percentile(lat[name], 50) * 1000:.1f} ms",
             f"{percentile(lat[name], 99) * 1000:.1f} ms",
             f"{sum(rate[name]) / len(rate[name]):.0f}"] for name in urls]  # fmt: skip


async def _misses_per_s(http: httpx.AsyncClient, url: str, n: int, client: str) -> float:
    """Fresh questions answered per second from 16 connections at once (no error allowed)."""
    if client == "wrk":
        seconds = 5.0
        results, lost, _ = await asyncio.to_thread(
            _wrk, url, seconds, 16, warm=1, share=0.0, delay=0.0
        )
        errors = lost + sum(not cache.startswith("miss") for cache, _ in results)
        if errors:
            raise RuntimeError(f"{errors} of {len(results) + lost} fresh questions were not misses")
        return len(results) / seconds
    sem = asyncio.Semaphore(16)

    async def one() -> Any:
        async with sem:
            return await ask(http, url, fresh())

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - started)


async def overload(
    url: str, seconds: float, pids: dict[str, int], client: str = "wrk", connections: int = 200
) -> dict[str, Any]:
    """``connections`` clients in a loop for ``seconds``: 70% stored questions, 30% fresh.

    ``client``: ``wrk`` (bench/overload.lua; C, one thread) or ``python`` (httpx in this
    process). Also the CPU each process used meanwhile (gateway, upstream, the load generator),
    as a share of the machine's cores over the run: what the gateway had to work with.
    """
    warm = [f"Stored question {i} about {TOPICS[i % len(TOPICS)]}?" for i in range(300)]
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        for start in range(0, len(warm), 20):
            await asyncio.gather(*(ask(http, url, q) for q in warm[start : start + 20]))
        before = (await http.get(f"{url}/admin/stats")).json()["cache"]
        served0 = _served((await http.get(f"{url}/metrics")).text)
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        wall0 = time.monotonic()
        if client == "wrk":
            results, lost, generator_cpu = _wrk(url, seconds, connections, len(warm))
        else:
            own0 = time.process_time()
            results = await _python_users(http, url, seconds, connections, warm)
            lost, generator_cpu = 0, time.process_time() - own0
        wall = time.monotonic() - wall0
        cores = wall * (os.cpu_count() or 1)
        cpu = {name: (cpu_seconds(pid) - cpu0[name]) / cores for name, pid in pids.items()}
        cpu["load generator"] = generator_cpu / cores
        loadavg = os.getloadavg()[0]
        after = (await http.get(f"{url}/admin/stats")).json()["cache"]
        served = _served((await http.get(f"{url}/metrics")).text)
    server_p99 = {
        cache: _bucket_p99({le: n - served0.get(cache, {}).get(le, 0) for le, n in bounds.items()})
        for cache, bounds in served.items()
    }
    misses = [t for c, t in results if c == "miss"]
    hits = [t for c, t in results if c in ("exact", "semantic")]
    errors = [c for c, _ in results if c.startswith("error")]
    skipped = after["semantic_skipped"]["overload"] - before["semantic_skipped"]["overload"]
    return {"client": client, "requests": len(results) + lost, "errors": len(errors) + lost,
            "hits": len(hits), "misses": len(misses), "miss_p50": percentile(misses, 50),
            "miss_p99": percentile(misses, 99), "hit_p99": percentile(hits, 99),
            "skipped": skipped, "rps": len(results) / seconds, "cpu_share": cpu,
            "loadavg_1min_end": loadavg, "embedder": after.get("embedder"),
            "server_p99_le": server_p99}  # fmt: skip


async def _python_users(
    http: httpx.AsyncClient, url: str, seconds: float, connections: int, warm: list[str]
) -> list[tuple[str, float]]:
    results: list[tuple[str, float]] = []
    deadline = time.monotonic() + seconds

    async def user() -> None:
        while time.monotonic() < deadline:
            if random.random() < 0.7:
                results.append(await ask(http, url, random.choice(warm)))
            else:
                results.append(await ask(http, url, fresh(), UPSTREAM_DELAY))

    await asyncio.gather(*(user() for _ in range(connections)))
    return results


_CLIENTS = {
    "wrk": "wrk 4.1 (C, one thread, bench/overload.lua; latency from the request's write to its "
    "response, matched by x-request-id)",
    "python": "httpx, 200 connections in one Python process",
}


def _wrk(
    url: str,
    seconds: float,
    connections: int,
    warm: int,
    share: float = 0.7,
    delay: float = UPSTREAM_DELAY,
) -> tuple[list[tuple[str, float]], int, float]:
    """Load from wrk (part 2's; part 1's with ``share`` 0): ``(x-cache or error, seconds)``
    per answered request, the requests wrk counted as failed without a response (socket
    errors, timeouts), and wrk's CPU seconds. ``share``: of requests repeating one of the
    ``warm`` stored questions; ``delay``: the fake upstream's for fresh ones."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("bench.overload --client wrk needs wrk: apt-get install wrk "
                         "(or use --client python)")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "responses"
        cmd = [wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "60s",
               "-s", str(Path(__file__).with_name("overload.lua")), url, "--",
               str(out), str(warm), str(delay), str(share), f"{os.getpid()}x{next(_serial)}"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        stdout = proc.stdout.read() if proc.stdout else ""
        if status != 0:
            raise RuntimeError(f"wrk failed ({status}):\n{stdout}")
        results: list[tuple[str, float]] = []
        for path in sorted(Path(tmp).glob("responses.*")):
            for line in path.read_text().splitlines():
                cache, took = line.split(" ")
                if float(took) < 0:  # (its request id did not come back)
                    cache = "error-unmatched"
                results.append((cache.replace("-", " ", 1), float(took)))
    summary = dict(kv.split("=") for kv in stdout.split("wrk-summary ", 1)[1].split())
    lost = sum(int(summary[k]) for k in ("connect", "read", "write", "timeout"))
    return results, lost, usage.ru_utime + usage.ru_stime


_PART1 = {
    "wrk": "wrk (16 connections, 4 rounds of 5 s per gateway, every question fresh)",
    "python": "httpx in this process (which tops out below the gateway on 2 cores)",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--misses", type=int, default=200, help="misses per side, part 1")
    parser.add_argument("--waits", default="100", help="max_wait_ms values (none: null), part 2")
    parser.add_argument("--backends", default="torch,onnx,onnx-int8",
                        help="cache.semantic.embedder_backend values, part 1")  # fmt: skip
    parser.add_argument("--admission", default="off,10",
                        help="server.admission_max_lag_ms values (off: none), part 2")  # fmt: skip
    parser.add_argument("--client", choices=("wrk", "python"), default="wrk",
                        help="part 2's load generator (wrk: Debian's package)")  # fmt: skip
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    random.seed(0)
    header = run_header()
    sides: dict[str, dict[str, Any] | None] = {
        f"semantic on, {b}": {"max_wait_ms": None, "embedder_backend": b}
        for b in args.backends.split(",")
    }
    cost: list[list[Any]] = []
    if args.misses:  # (0: part 2 only, not published)
        with gateways({**sides, "semantic off": None}) as (urls, _):
            cost = asyncio.run(miss_cost(urls, args.misses, args.client))
    runs: dict[str, dict[str, Any]] = {}
    for admission in args.admission.split(","):
        for wait in args.waits.split(","):
            setting = None if wait == "none" else int(wait)
            lag = "null" if admission == "off" else admission
            with gateways({"gateway": {"max_wait_ms": setting}}, lag) as (urls, pids):
                runs[f"{admission} {wait}"] = asyncio.run(
                    overload(urls["gateway"], args.seconds, pids, args.client)
                )
    rows = [[*w.split(" "), r["requests"], r["errors"], f"{r['hits'] / max(1, r['requests']):.0%}",
             f"{r['miss_p50']:.2f} s", f"{r['miss_p99']:.2f} s", f"{r['hit_p99']:.3f} s",
             r["skipped"], f"{r['rps']:.0f}",
             " / ".join(f"{r['cpu_share'][k]:.0%}" for k in ("gateway", "upstream", "load generator")),
             f"{r['loadavg_1min_end']:.1f}",
             " / ".join(f"≤ {r['server_p99_le'].get(c, float('nan')):g} s" for c in ("miss", "exact"))]
            for w, r in runs.items()]  # fmt: skip
    text = "\n\n".join([
        "## Miss cost and overload (`bench/overload.py`)",
        f"`{command('overload', argv)}`, load average at start {header['loadavg_start'][0]:.1f} "
        "(2 shared cores). Part 1: fresh questions (misses) through a gateway with the semantic "
        "tier on (one gateway per `embedder_backend`) and one with it off, alternating rounds in "
        "one run; instant fake upstream. One at a time from httpx in this process; 16 "
        f"concurrent from {_PART1[args.client]}.",
        table(["gateway", "misses one at a time", "p50", "p99", "misses/s at 16 concurrent"],
              cost),
        f"Part 2: 200 connections × {args.seconds:.0f} s, 70% repeats of stored questions, 30% "
        f"fresh questions (upstream {UPSTREAM_DELAY} s), by `server.admission_max_lag_ms` and "
        "`cache.semantic.max_wait_ms`; load "
        f"generator: {_CLIENTS[args.client]}; "
        "`skipped` is `cachegate_semantic_skipped_total{reason=\"overload\"}`; CPU: each "
        "process's CPU time over the run as a share of all cores (the rest went to other jobs "
        "on the machine or was idle); the gateway runs the shipped `embedder_backend`. The "
        "gateway's own p99 is read from its `cachegate_request_duration_seconds` histogram "
        "(the bucket bound holding 99%): the time inside the gateway (admission's wait "
        "included), not in the client's or the kernel's queues.",
        table(["admission_max_lag_ms", "max_wait_ms", "requests", "errors", "hits", "miss p50", "miss p99", "hit p99",
               "skipped", "req/s", "CPU: gateway / upstream / load generator",
               "load avg at end", "gateway's own p99: miss / exact"], rows),
    ])  # fmt: skip
    doc = bool(cost) and not args.no_doc
    publish("overload", {**header, "miss_cost": cost, "overload": runs}, text, doc)


def _served(metrics: str) -> dict[str, dict[float, float]]:
    """``cachegate_request_duration_seconds`` buckets by cache outcome, summed over routes."""
    out: dict[str, dict[float, float]] = {}
    for line in metrics.splitlines():
        if line.startswith("cachegate_request_duration_seconds_bucket{"):
            labels, value = line[line.index("{") + 1 :].rsplit("} ", 1)
            tags = dict(part.split("=", 1) for part in labels.split(","))
            cache, le = tags["cache"].strip('"'), float(tags["le"].strip('"'))
            out.setdefault(cache, {})
            out[cache][le] = out[cache].get(le, 0.0) + float(value)
    return out


def _bucket_p99(cumulative: dict[float, float]) -> float:
    """The smallest bucket bound holding 99% of the requests (the gateway's own p99, bounded)."""
    total = cumulative.get(float("inf"), 0.0)
    for le in sorted(cumulative):
        if total and cumulative[le] >= 0.99 * total:
            return le
    return float("nan")


def _flow(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {'null' if v is None else v}" for k, v in d.items()) + "}"


if __name__ == "__main__":
    main()
