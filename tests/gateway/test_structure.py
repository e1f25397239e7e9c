"""The shape of ``gateway/``: no import cycles, every module importable alone, short functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
MODULES = sorted(p.stem for p in GATEWAY.glob("*.py") if p.stem != "__init__")
#: ``python -m gateway`` runs the CLI: importing it is running it.
IMPORTABLE = [m for m in MODULES if m != "__main__"]
MAX_FUNCTION_LINES = 50


def _imports(module: str) -> set[str]:
    """The gateway modules ``module`` imports, at import time or later (inside functions),
    but not those imported only for type checking (``if TYPE_CHECKING:``)."""
    tree = ast.parse((GATEWAY / f"{module}.py").read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                names = [node.module] if node.module else [a.name for a in node.names]
            elif node.module and node.module.startswith("gateway."):
                names = [node.module.split(".")[1]]
            else:
                continue
            found.update(n.split(".")[0] for n in names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("gateway."))
    return found & set(MODULES)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_of_gateway_is_acyclic() -> None:
    graph = {m: _imports(m) for m in MODULES}
    assert graph["api"] >= {"pipeline", "canonical"}  # the parser sees imports at all
    assert _cycle(graph) is None


@pytest.mark.parametrize("module", IMPORTABLE)
def test_each_gateway_module_imports_alone(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import gateway.{module}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=GATEWAY.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_function_in_gateway_is_short() -> None:
    long = []
    for module in MODULES:
        tree = ast.parse((GATEWAY / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_FUNCTION_LINES:
                    long.append(f"gateway/{module}.py:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)
