"""The harness's shape: every module imports on its own, the imports form no cycle, and the
harness names nothing of the grader (which configures it instead: `forkserver.configure`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.importgraph import imported_modules

HARNESS = Path(__file__).resolve().parents[1]
ROOT = HARNESS.parent
SCRIPTS = {"harness.shim"}  # run as a script by the forkserver's interpreter; not importable


def module_files() -> dict[str, Path]:
    """{dotted name: file} of the harness's own modules (its tests left out)."""
    return {("harness" if p.stem == "__init__" else f"harness.{p.stem}"): p
            for p in sorted(HARNESS.glob("*.py"))}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the DFS stack, "done" after
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_reader_sees_imports_and_cycles():
    graph = import_graph()
    assert "harness.procfs" in graph["harness.proctree"]
    assert "harness.forkserver" in graph["harness.sandbox"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_harness_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "harness import cycle: " + " -> ".join(cycle or [])


def test_the_sandbox_and_the_ranks_do_not_import_the_launcher():
    graph = import_graph()
    assert "harness.launcher" not in graph["harness.sandbox"]
    assert "harness.sandbox" not in graph["harness.rankmain"]
    assert "harness.sandbox" not in graph["harness.forkserver"]


def test_the_harness_names_no_grader_module():
    named = [f"{path.relative_to(ROOT)}:{n}" for path in module_files().values()
             for n, line in enumerate(path.read_text().splitlines(), 1) if "grader" in line.lower()]
    assert not named, ("harness modules must not name the grader (it passes its module names "
                       "in through harness.forkserver.configure): " + ", ".join(named))


@pytest.mark.parametrize("name", sorted(set(module_files()) - SCRIPTS))
def test_each_module_imports_in_a_fresh_interpreter(name):
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"`python -c 'import {name}'` failed:\n{proc.stderr[-3000:]}"
