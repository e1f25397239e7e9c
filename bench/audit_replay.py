"""Does the live audit's estimate hold the true wrong-hit rate? A labelled workload, replayed.

    python -m bench.audit_replay                 # ~15 min here; bench/results/audit_replay.json + docs
    python -m bench.audit_replay --rate 1.0      # audit every semantic hit

Issue 12's target: on a replayed labelled workload, the audit's estimate (``/admin/stats``
``cache.audit``) lands within its own 95% interval of the true wrong-hit rate.

Workload: the held-out labelled pairs (bench/data/contrast_heldout.jsonl and the adversarial
set's held-out half), each in a namespace of its own (``x-cache-namespace``), shuffled (seed
12): the pair's stored question is asked (a miss, stored), then the new one (a semantic hit, or
not), through ``cachegate serve`` at the shipped semantic defaults with ``audit_rate``. The
upstream is an oracle (this file; the pair travels in the request's ``user`` field, which the
gateway passes on but does not key on): it answers each question with its pair's answer,
reworded on every call (one of three templates drawn at random, never the one of the call before,
so an audit's fresh answer is never the stored wording): one answer for both questions of a
``same`` pair, two of a different one. The draw keeps the audit's two answers (served, fresh)
and its control's (fresh, fresh again) alike in how they differ, as a model's samples are; the
templates in a fixed turn (before 2026-12-07) gave audits one pair of templates and controls
another, which the judge told apart at different rates (words: 30.5% against 18.3% of 600 same
pairs judged different), and the estimate over-counted by that much.
Truth of a served semantic hit: its pair's label. The audit's verdicts are summed over the
namespaces (its estimate is per namespace) and the estimate taken over the sums, as the gateway
takes it (``semantic.audit.estimate_rate``): with the controls on (the default; the request of a
judged audit asked again and its two answers compared), net of the judge's false alarms, and
also the judged share alone with its Wilson interval (the estimate without controls).

Two answer models, each a scenario of its own (a fresh gateway):

* ``numbers``: an answer restates its question and gives a number of its own (two different
  answers differ in the number: what the audit's hard check compares);
* ``words``: the same, with a word of its own (a plan name) instead of a number: two answers
  then differ in one word, which only the answers' embedding cosine can tell.

Requests are sent one at a time; at the end the run waits for the audits still running.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.contrast_data import DATA
from bench.report import CACHEGATE, command, free_port, publish, run_header, running, table
from bench.train_verifier import adversarial_held

SEED = 12
WORDS = ["amber", "basalt", "cedar", "dune", "ember", "fjord", "garnet", "harbor", "indigo",
         "juniper", "kestrel", "lagoon", "meadow", "nimbus", "onyx", "prairie", "quartz",
         "raven", "sierra", "tundra", "umber", "violet", "willow", "xenon", "yarrow", "zephyr"]  # fmt: skip
TEMPLATES = ["{q} The answer is {v}.", "{q} It is {v}, according to our records.",
             'To answer "{q}": {v}.']  # fmt: skip


def labelled_pairs() -> list[dict[str, Any]]:
    """The held-out labelled pairs, shuffled (seed 12)."""
    rows = [json.loads(line) for line in (DATA / "contrast_heldout.jsonl").open()]
    rows += [r for r in map(json.loads, (DATA / "adversarial_pairs.jsonl").open())
             if adversarial_held(r["a"])]  # fmt: skip
    random.Random(SEED).shuffle(rows)
    return rows


class Oracle:
    """An OpenAI-compatible upstream answering each question with its pair's answer."""

    def __init__(self, pairs: list[dict[str, Any]], answers: str) -> None:
        self.answers = answers
        #: (pair, question) -> (answer number, the question it restates)
        self.intent: dict[tuple[str, str], tuple[int, str]] = {}
        for i, r in enumerate(pairs):
            self.intent[(f"p{i}", r["a"])] = (2 * i, r["a"])
            self.intent.setdefault(
                (f"p{i}", r["b"]), (2 * i, r["a"]) if r["same"] else (2 * i + 1, r["b"])
            )
        #: answer number -> the template of its last call
        self.last: dict[int, int] = {}
        self._rng = random.Random(SEED)
        self._lock = threading.Lock()
        self._calls = itertools.count()

    def wording(self, n: int) -> int:
        """The template of answer ``n``'s next call: at random, never its last call's."""
        with self._lock:  # NOTE: the upstream serves from several threads
            k = self._rng.choice([t for t in range(len(TEMPLATES)) if t != self.last.get(n)])
            self.last[n] = k
        return k

    def value(self, n: int) -> str:
        if self.answers == "numbers":
            return str(1000 + 7 * n)
        return f"the {WORDS[n % len(WORDS)]} {WORDS[(n // len(WORDS)) % len(WORDS)]} plan"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from tests.fake_upstream import read_body, send_json

        if scope["type"] != "http":
            return
        request = json.loads(await read_body(receive))
        n, restated = self.intent[(request["user"], request["messages"][-1]["content"])]
        k, call = self.wording(n), next(self._calls)
        text = TEMPLATES[k].format(q=restated, v=self.value(n))
        await send_json(send, 200, {
            "id": f"chatcmpl-{n}-{call}", "object": "chat.completion", "created": 0,
            "model": "oracle", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})  # fmt: skip


@contextlib.contextmanager
def gateway(oracle_url: str, rate: float) -> Iterator[str]:
    url = f"http://127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.yaml"
        config.write_text(
            f"data_dir: {tmp}/data\nserver: {{log_level: warning}}\n"
            f"cache: {{semantic: {{enabled: true, audit_rate: {rate}, "
            "audit_max_concurrency: 4}}\n"
            f"models:\n  oracle: {{backend: openai, base_url: '{oracle_url}/v1', api_key: sk}}\n"
        )
        cmd = [CACHEGATE, "serve", "--config", str(config), "--port", url.rsplit(":", 1)[1]]
        with running([(cmd, f"{url}/readyz")], ready_timeout=180, stop_timeout=20):
            yield url


def scenario(answers: str, rate: float) -> dict[str, Any]:
    from semantic.audit import estimate_rate, wilson
    from tests.fake_upstream import ThreadedServer

    pairs = labelled_pairs()
    upstream = ThreadedServer(Oracle(pairs, answers)).start()
    try:
        with gateway(upstream.url, rate) as url, httpx.Client(base_url=url, timeout=60) as http:
            hits = wrong = 0
            for i, pair in enumerate(pairs):
                for question in (pair["a"], pair["b"]):
                    r = http.post("/v1/chat/completions", headers={"x-cache-namespace": f"p{i}"},
                                  json={"model": "oracle", "user": f"p{i}",
                                        "messages": [{"role": "user", "content": question}]})  # fmt: skip
                    r.raise_for_status()
                hits += r.headers["x-cache"] == "semantic"
                wrong += r.headers["x-cache"] == "semantic" and not pair["same"]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                audit = http.get("/admin/stats").json()["cache"]["audit"]
                if audit["running"] == 0:
                    break
                time.sleep(0.2)
    finally:
        upstream.stop()
    keys = ("audits", "wrong", "errors", "dropped", "controls", "control_wrong", "control_errors")
    counts = {k: sum(e[k] for e in audit["estimates"]) for k in keys}
    low, high = wilson(counts["wrong"], counts["audits"])
    net, net_low, net_high = estimate_rate(
        counts["wrong"], counts["audits"], counts["control_wrong"], counts["controls"]
    )
    true_rate = wrong / hits if hits else 0.0
    return {"answers": answers, "rate": rate, "pairs": len(pairs), "semantic_hits": hits,
            "wrong_hits": wrong, "true_rate": true_rate, "audits": counts["audits"],
            "audit_wrong": counts["wrong"], "errors": counts["errors"],
            "dropped": counts["dropped"],
            "estimate": counts["wrong"] / counts["audits"] if counts["audits"] else 0.0,
            "interval95": [low, high], "within": low <= true_rate <= high,
            "controls": counts["controls"], "control_wrong": counts["control_wrong"],
            "control_errors": counts["control_errors"], "net_estimate": net,
            "net_interval95": [net_low, net_high],
            "net_within": net_low <= true_rate <= net_high}  # fmt: skip


def section(runs: list[dict[str, Any]], rate: float, cmd: str, machine: str) -> str:
    """The docs section of a run (also rebuilt from bench/results/audit_replay.json)."""

    def estimate(rate: float, interval: list[float], within: bool) -> list[str]:
        return [f"{rate:.1%}", f"[{interval[0]:.1%}, {interval[1]:.1%}]",
                "**yes**" if within else "**no**"]  # fmt: skip

    rows = [[r["answers"], r["pairs"], r["semantic_hits"], r["wrong_hits"],
             f"{r['true_rate']:.1%}", f"{r['audits']} ({r['dropped']} dropped, {r['errors']} errors)",
             r["audit_wrong"], f"{r['control_wrong']} of {r['controls']}",
             *estimate(r["net_estimate"], r["net_interval95"], r["net_within"]),
             *estimate(r["estimate"], r["interval95"], r["within"])] for r in runs]  # fmt: skip
    return "\n\n".join([
        "## Live audit vs the truth (`bench/audit_replay.py`)",
        f"`{cmd}`, {machine}. The held-out labelled pairs "
        "(contrast held-out set and the adversarial set's held-out half), each in a namespace "
        "of its own: its stored question, then its new one, through a `cachegate serve` at "
        f"the shipped semantic defaults with `audit_rate: {rate}`; an oracle upstream "
        "answers with the pair's answer (one for a `same` pair, two otherwise), reworded on "
        "every call. `numbers`: two answers differ in a number; `words`: in one word (a plan "
        "name). True rate: semantic hits of pairs labelled different, over all semantic hits. "
        "The audit's verdicts summed over the namespaces. Controls: a judged audit's request "
        "asked again, its two answers compared (a wrong one is the judge's false alarm). The "
        "estimate (the default, `audit_controls: true`): net of the controls' false alarms, "
        "Newcombe 95% interval; judged share: wrong audits over judged ones, Wilson 95% interval "
        "(the estimate without controls). Target (issue 12): the true rate inside the interval.",
        table(["answers", "pairs", "semantic hits", "wrong hits", "true rate",
               "audits", "judged wrong", "controls judged wrong", "estimate",
               "95% interval", "true rate inside", "judged share", "its 95% interval",
               "inside"], rows),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.5, help="cache.semantic.audit_rate")
    parser.add_argument("--answers", default="numbers,words")
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    header = run_header()
    runs = [scenario(a, args.rate) for a in args.answers.split(",")]
    text = section(runs, args.rate, command("audit_replay", argv), header["machine"])
    publish("audit_replay", {**header, "runs": runs}, text, not args.no_doc)


if __name__ == "__main__":
    main()
