"""Shared helpers for benchmarks: percentiles, result files, and docs/benchmarks.md sections.

Each benchmark owns one section of docs/benchmarks.md, between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``; running a benchmark rewrites only its own section, so the page always
shows the latest run of each, with the command that produced it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CACHEGATE = str(Path(sys.executable).parent / "cachegate")
DOC = ROOT / "docs" / "benchmarks.md"

_HEADER = """# Benchmarks

Every figure on this page was produced by the command shown in its section, on the machine
described there. Ratios are measured side by side in the same run (the machine is shared and
noisy), so compare ratios rather than absolute times. `make bench` reruns everything.
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout: float = 60) -> None:
    """Poll ``url`` until it answers with a status below 500."""
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@contextlib.contextmanager
def running(
    processes: Sequence[tuple[list[str], str]],
    *,
    ready_timeout: float = 60,
    stop_timeout: float = 30,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start every ``(command, ready_url)`` at once, wait until each URL answers, and on exit
    terminate them all (gracefully: SIGTERM, then wait). The processes run in the repository
    root with it on ``PYTHONPATH`` and ``HF_HUB_OFFLINE=1``. Yields them, in order."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for command, _ in processes:
            procs.append(subprocess.Popen(command, env=env, cwd=ROOT))
        for _, url in processes:
            wait_ready(url, ready_timeout)
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=stop_timeout)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a live process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    cpus = os.cpu_count() or 0
    return f"{platform.machine()}, {cpus} CPU cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"


def git_state() -> str:
    """The commit measured, and the uncommitted files of the packages if any."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return done.stdout.rstrip()

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        status = git("status", "--porcelain", "gateway", "semantic", "prefix", "localmodel")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    dirty = [line[3:] for line in status.splitlines()]
    return commit + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else "")


def run_header() -> dict[str, Any]:
    """What every result file starts with: the machine, the code measured, the load at start."""
    return {"machine": machine(), "code": git_state(), "loadavg_start": os.getloadavg()}


def save_json(name: str, data: Any) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def update_section(name: str, markdown: str) -> None:
    """Replace (or append) this benchmark's section of docs/benchmarks.md."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else _HEADER
    block = f"<!-- bench:{name} -->\n{markdown.strip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S
    )
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    DOC.write_text(text)


def command(name: str, argv: list[str] | None) -> str:
    """The command line that reproduces a run, as a section shows it (``argv`` None: the
    process's own arguments, as ``python -m bench.NAME ...`` gave them to ``main()``)."""
    if argv is None:
        argv = sys.argv[1:] if Path(sys.argv[0]).stem == name else []
    return f"python -m bench.{name}" + (" " + " ".join(argv) if argv else "")


def publish(name: str, results: Any, text: str, write_doc: bool = True) -> str:
    """Save a run's results as bench/results/NAME.json, rewrite its docs section, print it."""
    save_json(name, results)
    if write_doc:
        update_section(name, text)
    print(text)
    return text
