"""Run every benchmark in sequence (what `make bench` does); each rewrites its docs section.

    python -m bench.run_all                     # all of BENCHMARKS
    python -m bench.run_all overhead prefix     # only these

Each module's ``main([])`` writes bench/results/NAME.json and its own section of
docs/benchmarks.md. A failing benchmark (``bench.overload`` without wrk exits, for one) does
not stop the others; the exit status is 1 if any failed. The modules under bench/ that are not
benchmarks, or not run here on purpose, are in ``NOT_LISTED`` with the reason.
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
    "embed_backends",
    "overload",
    "audit_replay",
]

#: Modules under bench/ that ``make bench`` does not run, and why.
NOT_LISTED = {
    "semantic_pairs": "semantic_eval runs it and includes its tables",
    "guard_tune": "it trains the guard and rewrites its weights: not a measurement",
    "gpu_check": "a device check, run on a machine with a GPU",
    "embed_tune": "an experiment (fine-tuning the embedder), nothing shipped",
    "token_align": "an experiment (token-alignment features for the guard), nothing shipped",
    "verifier_backends": "prints and saves its figures; the verifier's section quotes them",
    "train_verifier": "trains the verifier and rewrites its weights: not a measurement",
    "contrast_data": "writes the contrast pairs the verifier trains and is measured on",
    "contrast_more": "training families that bench/contrast_data.py writes pairs from",
    "contrast_fresh": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_fresh2": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_fresh3": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_fresh4": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_fresh5": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_fresh6": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_fresh7": "held-out families that bench/contrast_data.py writes pairs from",
    "contrast_more2": "training families that bench/contrast_data.py writes pairs from",
    "wordnet_antonyms": "writes semantic/antonyms_wordnet.txt",
    "llamacpp": "bench.engine's llama.cpp side, not a benchmark of its own",
    "report": "helpers shared by the benchmarks",
    "run_all": "this file",
}


def main(argv: list[str] | None = None) -> int:
    names = list(argv) if argv else BENCHMARKS
    failed: list[str] = []
    for name in names:
        started = time.perf_counter()
        print(f"== bench.{name}", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            module.main([])
        except SystemExit as exc:  # a bench that says what it lacks (overload without wrk)
            print(exc, file=sys.stderr)
            failed.append(name)
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
