"""Prefix-affinity routing vs round-robin over CPU workers running the bundled model.

    python -m bench.routing            # writes bench/results/routing.json, updates docs/benchmarks.md

Two ``cachegate worker`` processes (one torch thread each) serve SmolLM2; a gateway with the
response cache off spreads shared-prefix workloads over them — several long system prompts
× many users, each user asking one question; two shapes, see ``WORKLOADS`` — first with
``routing.policy: prefix``, then with ``round_robin`` (the workers' prefix caches are flushed in
between). Each worker's KV budget (sized from the tokenised prompt) holds only some of the
system prompts, as a real deployment's memory would: affinity
keeps each prompt on one worker, round-robin makes every worker hold (and evict) all of them.

Reported per policy: prefix hit rate (cached / prompt tokens, from the workers' own
``usage.prompt_tokens_details.cached_tokens``), time to first token p50/p90, and wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.report import (
    CACHEGATE,
    command,
    free_port,
    percentile,
    publish,
    run_header,
    running,
    table,
)

ROOT = Path(__file__).resolve().parents[1]
TOPICS = ["a hardware store", "a bank", "an airline", "a hospital", "a law firm", "a bakery"]
KV_BYTES_PER_TOKEN = 46_080  # SmolLM2-135M, float32


def system_prompt(topic: str, words: int) -> str:
    rng = random.Random(topic)
    filler = " ".join(rng.choice(["policy", "customer", "order", "refund", "hours", "staff",
                                  "price", "delivery", "account", "support"]) for _ in range(words))  # fmt: skip
    return f"You are the assistant of {topic}. Follow these notes carefully: {filler}."


@contextlib.contextmanager
def cluster(workers: int, budget_bytes: int, model_dir: str) -> Iterator[tuple[list[str], str]]:
    """Start the workers; yield their URLs and a scratch directory for gateway configs."""
    with tempfile.TemporaryDirectory() as tmp:
        processes, urls = [], []
        for i in range(workers):
            port = free_port()
            config = Path(tmp) / f"worker{i}.yaml"
            model = {"backend": "local", "source": model_dir, "threads": 1,
                     "prefix_cache_bytes": budget_bytes, "prefix_cache_ttl": None}  # fmt: skip
            config.write_text(yaml.safe_dump({"data_dir": f"{tmp}/w{i}", "server": {"log_level": "warning"},
                                              "models": {"smollm2": model}}))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
            command = [CACHEGATE, "worker", "--config", str(config), "--port", str(port)]
            processes.append((command, f"{urls[-1]}/readyz"))
        with running(processes, ready_timeout=180):
            yield urls, tmp


@contextlib.contextmanager
def gateway(
    workers: list[str], policy: str, tmp: str, max_imbalance: int | None = None
) -> Iterator[str]:
    port = free_port()
    config = Path(tmp) / f"gateway-{policy}.yaml"
    routing: dict[str, Any] = {"policy": policy}
    if max_imbalance is not None:
        routing["max_imbalance"] = max_imbalance
    model = {"backend": "openai", "replicas": [f"{u}/v1" for u in workers], "routing": routing,
             "timeout": {"read": 600}}  # fmt: skip
    config.write_text(yaml.safe_dump({"data_dir": f"{tmp}/g-{policy}", "server": {"log_level": "warning"},
                                      "cache": {"enabled": False}, "models": {"smollm2": model}}))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with running(
        [([CACHEGATE, "serve", "--config", str(config), "--port", str(port)], f"{url}/readyz")]
    ):
        yield url


async def run_workload(
    url: str, requests: list[list[dict[str, str]]], concurrency: int
) -> dict[str, Any]:
    ttfts: list[float] = []
    prompt_tokens = cached_tokens = 0
    queue = list(enumerate(requests))

    async def one(client: httpx.AsyncClient, messages: list[dict[str, str]]) -> None:
        nonlocal prompt_tokens, cached_tokens
        body = {"model": "smollm2", "messages": messages, "max_tokens": 2, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        started = time.perf_counter()
        first: float | None = None
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if first is None and chunk.get("choices"):
                    first = time.perf_counter() - started
                if chunk.get("usage"):
                    prompt_tokens += chunk["usage"]["prompt_tokens"]
                    cached_tokens += chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
        ttfts.append(first if first is not None else time.perf_counter() - started)

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            _, messages = queue.pop(0)
            await one(client, messages)

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return {
        "requests": len(requests),
        "wall_s": time.perf_counter() - started,
        "prefix_hit_rate": cached_tokens / max(prompt_tokens, 1),
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached_tokens,
        "ttft_p50": percentile(ttfts, 50),
        "ttft_p90": percentile(ttfts, 90),
    }


@dataclass(frozen=True)
class Workload:
    """A shared-prefix workload and the KV budget each worker gets for it."""

    name: str
    prompts: int  # distinct system prompts
    users: int  # users per system prompt, one request each
    budget_prompts: float  # how many system prompts one worker's KV budget holds

    def requests(self, words: int) -> list[list[dict[str, str]]]:
        prompts = [system_prompt(t, words) for t in TOPICS[: self.prompts]]
        workload = [
            [
                {"role": "system", "content": p},
                {"role": "user", "content": f"User {u}: what are your opening hours?"},
            ]
            for p in prompts
            for u in range(self.users)
        ]
        random.Random(0).shuffle(workload)
        return workload

    def budget_bytes(self, prompt_tokens: int) -> int:
        return int(self.budget_prompts * prompt_tokens * KV_BYTES_PER_TOKEN)


def prompt_tokens(model_dir: str, messages: list[dict[str, str]]) -> int:
    """Tokens of one rendered request (system prompt + question), as the workers count them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return len(ids)


# Two shapes, each with a per-worker KV budget for only part of its system prompts: with
# affinity every worker keeps the prompts routed to it; with round-robin every worker sees every
# prompt, and each one evicts the others.
WORKLOADS = (
    Workload("4 prompts × 12 users", prompts=4, users=12, budget_prompts=2.3),
    Workload("6 prompts × 8 users", prompts=6, users=8, budget_prompts=3.5),
)


def run_one(args: argparse.Namespace, workload: Workload, model_dir: str) -> dict[str, Any]:
    requests = workload.requests(args.words)
    tokens = prompt_tokens(model_dir, requests[0])
    budget = workload.budget_bytes(tokens)
    result: dict[str, Any] = {"prompts": workload.prompts, "users": workload.users,
                              "prompt_tokens": tokens, "budget_bytes": budget, "policies": {}}  # fmt: skip
    with cluster(args.workers, budget, model_dir) as (workers, tmp):
        for policy in ("prefix", "round_robin"):
            for w in workers:  # every policy starts from cold workers
                httpx.post(
                    f"{w}/admin/cache/flush", json={"prefix": True}, timeout=30
                ).raise_for_status()
            with gateway(workers, policy, tmp, args.max_imbalance) as url:
                stats = asyncio.run(run_workload(url, requests, args.concurrency))
                backend = httpx.get(f"{url}/admin/stats").json()["backends"]["smollm2"]
                stats["routed"] = backend["routing"]["routed"]
                result["policies"][policy] = stats
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    from localmodel.loader import convert_bundled
    from tests.conftest import CACHE_DIR

    model_dir = str(convert_bundled(CACHE_DIR))
    results: dict[str, Any] = {**run_header(), "workloads": {}, "workers": args.workers,
                               "words": args.words, "concurrency": args.concurrency}  # fmt: skip
    for workload in WORKLOADS:
        if args.workload is None or args.workload == workload.prompts:
            results["workloads"][workload.name] = run_one(args, workload, model_dir)
    results["loadavg_end"] = os.getloadavg()
    return results


def markdown(results: dict[str, Any], command: str) -> str:
    rows, notes = [], []
    tokens = "/".join(sorted({str(w["prompt_tokens"]) for w in results["workloads"].values()}))
    for name, w in results["workloads"].items():
        for policy, r in w["policies"].items():
            budget = f"{w['budget_bytes'] / 2**20:.0f} MiB ({w['budget_bytes'] / w['prompt_tokens'] / KV_BYTES_PER_TOKEN:.1f} prompts)"
            rows.append([name, budget, policy, r["requests"],
                         f"**{r['prefix_hit_rate']:.1%}**", f"{r['ttft_p50'] * 1000:.0f}",
                         f"{r['ttft_p90'] * 1000:.0f}", f"{r['wall_s']:.1f}"])  # fmt: skip
        p, rr = w["policies"]["prefix"], w["policies"]["round_robin"]
        notes.append(
            f"- {name}: hit rate {p['prefix_hit_rate']:.1%} vs {rr['prefix_hit_rate']:.1%}; "
            f"TTFT p50 {p['ttft_p50'] * 1000:.0f} vs {rr['ttft_p50'] * 1000:.0f} ms, "
            f"p90 {p['ttft_p90'] * 1000:.0f} vs {rr['ttft_p90'] * 1000:.0f} ms; "
            f"wall {p['wall_s']:.1f} vs {rr['wall_s']:.1f} s."
        )
    return "\n".join([
        "## Prefix-affinity routing (`bench/routing.py`)",
        "",
        f"Command: `{command}` — {results['machine']}; code {results['code']}; load average "
        f"{results['loadavg_start'][0]:.1f} at start, {results['loadavg_end'][0]:.1f} at end.",
        f"{results['workers']} `cachegate worker` processes (SmolLM2-135M, CPU, 1 thread each) behind one gateway",
        f"(response cache off); requests of {tokens} prompt tokens (a long system prompt, then one user's",
        f"question) × users, shuffled, {results['concurrency']} requests in flight, `max_tokens: 2`. Each worker's",
        "KV budget holds only some of the system prompts (column 2, in prompts of that length); workers are",
        "restarted per workload and flushed between policies.",
        "",
        table(["workload", "KV budget / worker", "policy", "requests", "prefix hit rate", "TTFT p50 (ms)",
               "TTFT p90 (ms)", "wall (s)"], rows),
        "",
        "Prefix affinity vs round-robin:",
        "",
        *notes,
        "",
        "Round-robin sends every system prompt to every worker, whose budget holds only some of them, so",
        "prompts keep evicting each other and most requests prefill their whole prompt again; affinity",
        "keeps each prompt on the worker that holds it. Affinity's tail is each prompt's first (cold)",
        "request and the requests sent to the less-loaded worker while the preferred one was busy:",
        "about a tenth of the requests, so its p90 lands near a warm or a cold prefill from run to run.",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--words", type=int, default=300, help="filler words per system prompt")
    parser.add_argument(
        "--workload",
        type=int,
        choices=[w.prompts for w in WORKLOADS],
        default=None,
        help="run only the workload with this many system prompts (default: all; a partial run "
        "does not rewrite docs/benchmarks.md)",
    )
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument(
        "--max-imbalance",
        type=int,
        default=None,
        help="routing.max_imbalance (default: the config's)",
    )
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    results = run(args)
    text = markdown(results, command("routing", argv))
    return publish("routing", results, text, not args.no_doc and args.workload is None)


if __name__ == "__main__":
    main(sys.argv[1:])
