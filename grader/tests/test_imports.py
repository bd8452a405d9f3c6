"""The grader's import contract: its modules form no import cycle.

Every `import` counts, those inside function bodies too (a lazy import hides a cycle from the
interpreter, not from a reader), as in the harness's own `harness/tests/test_layout.py`. The
tests and the adversarial corpus are left out; the hidden suites are in.
"""

from __future__ import annotations

from pathlib import Path

from harness.importgraph import imported_modules

GRADER = Path(__file__).resolve().parents[1]
ROOT = GRADER.parent


def module_files() -> dict[str, Path]:
    """{dotted name: file} of every module of grader/ but its tests."""
    found = {}
    for path in sorted(GRADER.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        if relative.parts[:2] == ("grader", "tests"):
            continue
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_reader_sees_imports_and_cycles():
    graph = import_graph()
    assert "grader.manifest" in graph["grader.cli"]
    assert "grader.instructor.authoring.checks" in graph["grader.instructor.authoring.doctor"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_grader_import_graph_has_no_cycle():
    found = cycles(import_graph())
    assert not found, ("import cycles in grader/ (move what both sides need into a module "
                       "of its own that imports neither):\n  "
                       + "\n  ".join(" <-> ".join(c) for c in found))
