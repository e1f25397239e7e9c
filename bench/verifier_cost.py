"""What the semantic verifier costs a miss that has a related stored question.

    python -m bench.verifier_cost              # ~3 min; bench/results/verifier_cost.json + docs
    python -m bench.verifier_cost --pairs 60 --no-doc   # a smoke run

bench/overload.py measures misses whose neighbours differ in a number, which the hard checks
veto before the cross-encoder could run. Here each miss has a related stored question that no
hard check rejects: the held-out contrast traps (bench/data/contrast_heldout.jsonl, kinds the
hard checks do not catch: antonymous modifiers and verbs, audience, direction, tier, time),
each pair in its own namespace. Its stored question is asked first, then the trap; the trap's
latency counts when it is a miss. Three gateways in one run, taking turns pair by pair: the
shipped defaults (the verifier decides), ``verifier: off`` (the guard decides) and the
semantic tier off, against the instant fake upstream; and fresh questions with nothing related
stored, on each.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from typing import Any

import httpx

from bench.overload import ask, fresh, gateways
from bench.report import command, percentile, publish, run_header, table
from bench.train_verifier import DATA, SEED, _rows

SIDES: dict[str, dict[str, Any] | None] = {
    "verifier": {"max_wait_ms": None},
    "guard": {"max_wait_ms": None, "verifier": "off"},
    "off": None,
}
LABELS = {"verifier": "the verifier decides (default)", "guard": "verifier: off (the guard)",
          "off": "semantic tier off"}  # fmt: skip
KINDS = ("antonym_modifier", "antonym_verb", "audience", "direction", "tier", "time")


async def measure(urls: dict[str, str], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    related: dict[str, list[float]] = {name: [] for name in urls}
    alone: dict[str, list[float]] = {name: [] for name in urls}
    hits = dict.fromkeys(urls, 0)
    errors = dict.fromkeys(urls, 0)  # a refused or failed request is neither a hit nor a miss
    async with httpx.AsyncClient(timeout=60) as client:
        for i, pair in enumerate(pairs):
            for name, url in urls.items():
                await ask(client, url, pair["a"], namespace=f"p{i}")
                cache, seconds = await ask(client, url, pair["b"], namespace=f"p{i}")
                if cache == "miss":
                    related[name].append(seconds)
                elif cache.startswith("error"):
                    errors[name] += 1
                else:
                    hits[name] += 1
                cache, seconds = await ask(client, url, fresh(), namespace=f"f{i}")
                if cache == "miss":
                    alone[name].append(seconds)
                elif cache.startswith("error"):
                    errors[name] += 1
    return {name: {"related_misses": len(related[name]), "wrong_hits": hits[name],
                   "errors": errors[name],
                   "related_p50_ms": 1000 * percentile(related[name], 50),
                   "related_p99_ms": 1000 * percentile(related[name], 99),
                   "fresh_p50_ms": 1000 * percentile(alone[name], 50)}
            for name in urls}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    random.seed(SEED)
    header = run_header()
    rows = [r for r in _rows(DATA / "contrast_heldout.jsonl") if r["kind"] in KINDS]
    pairs = random.Random(SEED).sample(rows, min(args.pairs, len(rows)))
    with gateways(SIDES) as (urls, _):
        result = asyncio.run(measure(urls, pairs))
    base = result["off"]["related_p50_ms"]
    lines = [[LABELS[name], r["related_misses"], r["wrong_hits"], r["errors"],
              f"{r['related_p50_ms']:.1f} ms",
              f"{r['related_p99_ms']:.1f} ms", f"+{r['related_p50_ms'] - base:.1f} ms",
              f"{r['fresh_p50_ms']:.1f} ms"]
             for name, r in result.items()]  # fmt: skip
    text = "\n\n".join([
        "## What the verifier costs a miss (`bench/verifier_cost.py`)",
        f"`{command('verifier_cost', argv)}`, load average at start "
        f"{header['loadavg_start'][0]:.1f} (2 shared cores). {len(pairs)} held-out contrast "
        f"traps of kinds no hard check catches ({', '.join(KINDS)}), each in its own namespace: "
        "the stored question, then the trap; gateways taking turns pair by pair; instant fake "
        "upstream. \"Wrong hits\": traps served from the cache (not misses, not counted in the "
        "latency). Errors: requests the gateway refused or failed (in neither count). Fresh: a "
        "question with nothing related stored.",
        table(["gateway", "related misses", "wrong hits", "errors", "p50", "p99", "p50 vs semantic off",
               "fresh miss p50"], lines),
    ])  # fmt: skip
    publish("verifier_cost", {**header, "pairs": len(pairs), "result": result}, text,
            not args.no_doc)  # fmt: skip


if __name__ == "__main__":
    main()
