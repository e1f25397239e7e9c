"""``localmodel`` has no import cycles between its modules (function-level imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import localmodel

PACKAGE = Path(localmodel.__file__).parent


def _imports(path: Path) -> set[str]:
    """``localmodel.*`` modules that ``path`` imports anywhere (the package itself excluded)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith("localmodel.") and _module(n).exists()}
    return found


def _module(name: str) -> Path:
    return PACKAGE / f"{name.removeprefix('localmodel.')}.py"


def test_no_import_cycles_inside_localmodel() -> None:
    graph = {
        f"localmodel.{p.stem}": _imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"
    }
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        assert name not in visiting, f"import cycle: {' -> '.join([*visiting, name])}"
        if name in done:
            return
        visiting.append(name)
        for dep in sorted(graph.get(name, ())):
            visit(dep)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
    assert "localmodel.forward" in graph["localmodel.disk"]  # the phases live in a leaf
