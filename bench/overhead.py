"""Gateway overhead: the fake upstream called directly vs through `cachegate serve`.

    python -m bench.overhead            # writes bench/results/overhead.json, updates docs/benchmarks.md

Three processes on 127.0.0.1: the fake upstream (tests/fake_upstream.py), the gateway, and this
load generator. For each scenario, requests go directly to the upstream and through the gateway
with the cache bypassed (``cache-control: no-cache, no-store``), in alternating rounds, so both
sides see the same machine load; then exact-hit latency is measured through HTTP. The load
generator's own cost is in both sides and cancels out of the "added" column.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.report import machine, percentile, save_json, table, update_section

ROOT = Path(__file__).resolve().parents[1]
CACHEGATE = str(Path(sys.executable).parent / "cachegate")
BYPASS = {"cache-control": "no-cache, no-store"}
PASS_HEADER = [
    "request",
    "concurrency",
    "requests",
    "direct p50",
    "gateway p50",
    "added p50",
    "direct p99",
    "gateway p99",
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@contextlib.contextmanager
def servers() -> Iterator[tuple[str, str]]:
    """Start the fake upstream and the gateway; yield their base URLs."""
    up_port, gw_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(
            f"data_dir: {tmp}/data\n"
            "server: {log_level: warning}\n"
            "cache: {semantic: {enabled: false}}\n"
            "models:\n"
            f"  fake-model: {{backend: openai, base_url: 'http://127.0.0.1:{up_port}/v1', api_key: sk}}\n"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.fake_upstream", "--port", str(up_port)], env=env
            ),
            subprocess.Popen(
                [CACHEGATE, "serve", "--config", str(config), "--port", str(gw_port)], env=env
            ),
        ]
        try:
            _wait(f"http://127.0.0.1:{up_port}/_stats")
            _wait(f"http://127.0.0.1:{gw_port}/readyz")
            yield f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{gw_port}"
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=20)


async def _load(
    base: str, *, concurrency: int, requests: int, stream: bool, headers: dict[str, str], vary: bool
) -> list[float]:
    """Latencies (s) of ``requests`` calls made by ``concurrency`` workers (full response read)."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        counter = iter(range(requests))

        async def worker() -> None:
            for i in counter:
                text = f"benchmark question {i if vary else 0}"
                body = {
                    "model": "fake-model",
                    "messages": [{"role": "user", "content": text}],
                    "stream": stream,
                }
                started = time.perf_counter()
                async with client.stream(
                    "POST", "/v1/chat/completions", json=body, headers=headers
                ) as r:
                    async for _ in r.aiter_raw():
                        pass
                    if r.status_code != 200:
                        raise RuntimeError(f"HTTP {r.status_code}")
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def run(rounds: int, scale: float) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "scenarios": []}
    with servers() as (upstream, gateway):
        # warm up both paths (connections, JIT-less but cold caches, import of lazy modules)
        asyncio.run(
            _load(upstream, concurrency=4, requests=200, stream=False, headers={}, vary=True)
        )
        asyncio.run(
            _load(gateway, concurrency=4, requests=200, stream=False, headers=BYPASS, vary=True)
        )
        for stream in (False, True):
            for concurrency, n in ((1, int(300 * scale)), (50, int(1500 * scale))):
                direct: list[float] = []
                through: list[float] = []
                for _ in range(rounds):  # alternate, so both sides share the same noise
                    direct += asyncio.run(
                        _load(
                            upstream,
                            concurrency=concurrency,
                            requests=n,
                            stream=stream,
                            headers={},
                            vary=True,
                        )
                    )
                    through += asyncio.run(
                        _load(
                            gateway,
                            concurrency=concurrency,
                            requests=n,
                            stream=stream,
                            headers=BYPASS,
                            vary=True,
                        )
                    )
                results["scenarios"].append(
                    {
                        "name": "stream" if stream else "json",
                        "concurrency": concurrency,
                        "requests": len(direct),
                        "direct_p50": percentile(direct, 50),
                        "direct_p99": percentile(direct, 99),
                        "gateway_p50": percentile(through, 50),
                        "gateway_p99": percentile(through, 99),
                    }
                )
        # exact hits: one stored answer asked again and again
        asyncio.run(_load(gateway, concurrency=1, requests=1, stream=False, headers={}, vary=False))
        hits: dict[str, Any] = {}
        for concurrency, n in ((1, int(500 * scale)), (50, int(2000 * scale))):
            for stream in (False, True):
                lat = asyncio.run(
                    _load(
                        gateway,
                        concurrency=concurrency,
                        requests=n,
                        stream=stream,
                        headers={},
                        vary=False,
                    )
                )
                hits[f"{'stream' if stream else 'json'}@{concurrency}"] = {
                    "p50": percentile(lat, 50),
                    "p99": percentile(lat, 99),
                    "requests": len(lat),
                }
        results["exact_hits"] = hits
    return results


def markdown(results: dict[str, Any], command: str) -> str:
    rows = []
    for s in results["scenarios"]:
        added = s["gateway_p50"] - s["direct_p50"]
        rows.append(
            [
                s["name"],
                s["concurrency"],
                s["requests"],
                _ms(s["direct_p50"]),
                _ms(s["gateway_p50"]),
                f"**{_ms(added)}**",
                _ms(s["direct_p99"]),
                _ms(s["gateway_p99"]),
            ]
        )
    hit_rows = [
        [k.split("@")[0], k.split("@")[1], v["requests"], f"**{_ms(v['p50'])}**", _ms(v["p99"])]
        for k, v in results["exact_hits"].items()
    ]
    return "\n".join(
        [
            "## Gateway overhead (`bench/overhead.py`)",
            "",
            f"Command: `{command}` — {results['machine']}. Fake upstream, gateway and load generator",
            "share the machine's cores; latencies are full responses (stream: until `[DONE]`), in ms.",
            "",
            "Pass-through with the cache bypassed (`cache-control: no-cache, no-store`), direct vs",
            "through the gateway, alternating rounds. Target: added p50 ≤ 2 ms.",
            "",
            table(PASS_HEADER, rows),
            "",
            "Exact cache hits through HTTP (the upstream is not called). Target: p50 ≤ 2 ms.",
            "",
            table(["request", "concurrency", "requests", "p50", "p99"], hit_rows),
        ]
    )


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    results = run(args.rounds, args.scale)
    save_json("overhead", results)
    text = markdown(results, "python -m bench.overhead" + (" " + " ".join(argv) if argv else ""))
    if not args.no_doc:
        update_section("overhead", text)
    print(text)
    return text


if __name__ == "__main__":
    main(sys.argv[1:])
