"""Bars of structure (issue 31): no import circle among the rlt.training modules (counting
imports inside functions, which only hide a circle), no function over 80 lines and no module
over 600 lines in the package. Measured from the source, so a change that breaks a bar fails
here with the names to fix."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rlt"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def _training_imports() -> dict[str, set[str]]:
    pkg = PACKAGE / "training"
    names = {p.stem for p in pkg.glob("*.py")}
    graph = {}
    for path in pkg.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("rlt.training."):
                    deps.add(node.module.split(".")[2])
                elif node.module == "rlt.training":
                    deps |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.Import):
                deps |= {
                    a.name.split(".")[2] for a in node.names if a.name.startswith("rlt.training.")
                }
        graph[path.stem] = deps - {path.stem}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_circle_in_rlt_training():
    graph = _training_imports()
    assert "lifecycle" in graph["hydra_support"]  # the Hydra layer checks each cell, as designed
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_planted_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_functions_and_modules_stay_small():
    long_functions, big_modules = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            big_modules.append(f"{path.relative_to(PACKAGE)}: {len(text.splitlines())}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(PACKAGE)}:{node.name}: {n}")
    assert not big_modules, f"modules over {MAX_MODULE_LINES} lines: {big_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
