"""Run every benchmark in sequence (what `make bench` does); each rewrites its docs section.

    python -m bench.run_all                     # all of BENCHMARKS
    python -m bench.run_all overhead prefix     # only these

Each module's ``main([])`` writes bench/results/NAME.json and its own section of
docs/benchmarks.md. A failing benchmark does not stop the others; the exit status is 1 if any
failed. Not listed on purpose: ``semantic_pairs`` (``semantic_eval`` runs it and includes its
tables), ``guard_tune`` (it trains the guard and rewrites its weights: not a measurement) and
``gpu_check`` (a device check, run on a machine with a GPU).
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback

from bench.report import DOC

#: Module names under bench/, run in this order. Add new benchmarks here.
BENCHMARKS = [
    "overhead",
    "prefix",
    "engine",
    "kv",
    "routing",
    "semantic_eval",
    "semantic_latency",
    "verifier_eval",
    "verifier_cost",
]


def main(argv: list[str] | None = None) -> int:
    names = list(argv) if argv else BENCHMARKS
    failed: list[str] = []
    for name in names:
        started = time.perf_counter()
        print(f"== bench.{name}", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            module.main([])
        except Exception:
            traceback.print_exc()
            failed.append(name)
        print(f"== bench.{name}: {time.perf_counter() - started:.0f} s", flush=True)
    print(f"Results: bench/results/*.json; tables: {DOC}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
