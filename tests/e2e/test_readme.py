"""The README's first examples, run as they are written (the openai and anthropic SDKs, curl)
against `cachegate serve` with the bundled model: what they print is what the README says."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ServeProcess

README = Path(__file__).resolve().parents[2] / "README.md"
DOC_URL = "http://127.0.0.1:8080"


def block(lang: str, containing: str) -> str:
    """The first ```lang block of the README that holds ``containing``."""
    for match in re.finditer(rf"^```{lang}\n(.*?)^```", README.read_text(), re.M | re.S):
        if containing in match.group(1):
            return match.group(1)
    raise AssertionError(f"no ```{lang} block with {containing!r} in README.md")


def run_python(code: str, url: str) -> list[str]:
    """Run a README snippet against ``url``; the lines it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace(DOC_URL, url), "README.md", "exec"), {})
    return out.getvalue().splitlines()


def shown(code: str, printed: str) -> str:
    """The comment of the line printing ``printed``: what the README says it prints."""
    line = next(line for line in code.splitlines() if f"print({printed})" in line)
    return line.split("# ", 1)[1]


@pytest.fixture
def gateway(serve: Any, bundled_model_dir: Path, tmp_path: Path) -> ServeProcess:
    model = {"backend": "local", "source": str(bundled_model_dir), "threads": 1}
    return serve(yaml.safe_dump({  # the README's model name: the examples run unchanged
        "data_dir": str(tmp_path / "data"), "models": {"smollm2-135m-instruct": model},
    }))  # fmt: skip


def test_the_readme_examples_print_what_it_shows(gateway: ServeProcess) -> None:
    openai_code = block("python", "capital of France")
    answer = shown(openai_code, "reply.parse().choices[0].message.content")
    first, second = run_python(openai_code, gateway.url), run_python(openai_code, gateway.url)
    assert (first[0], second[0]) == ("miss", "exact")  # "miss the first time, exact the second"
    assert first[1] == second[1] == answer == "The capital of France is Paris."
    assert int(first[2]) >= 0 and int(second[2]) >= 0

    anthropic_code = block("python", "import anthropic")
    assert shown(anthropic_code, "reply.parse().content[0].text") == answer
    first, second = run_python(anthropic_code, gateway.url), run_python(anthropic_code, gateway.url)
    assert [first[0].split()[0], second[0].split()[0]] == ["miss", "exact"]
    assert first[1] == second[1] == answer


def test_the_readme_curl_shows_a_semantic_hit(gateway: ServeProcess) -> None:
    assert shutil.which("curl"), "curl is not installed (.ci/run installs it: apt-get install curl)"
    script = block("sh", "How can I reset my password?")
    command, listing = script.split("done\n", 1)
    ran = subprocess.run(["bash", "-c", command.replace(DOC_URL, gateway.url) + "done"],
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    printed = [line.split(":", 1) for line in ran.stdout.splitlines()]
    expected = [line.split(":", 1) for line in listing.splitlines()]
    assert [name for name, _ in printed] == [name for name, _ in expected]
    values = {name: value.strip() for name, value in printed[3:]}  # the second answer's
    assert [printed[0][1].strip(), values["x-cache"]] == ["miss", "semantic"]
    doc_similarity = float(dict(expected[3:])["x-cache-similarity"].split()[0])
    assert float(values["x-cache-similarity"]) == pytest.approx(doc_similarity, abs=0.002)
