"""The grader's layering: which part of grader/ may import which, read from the source.

grader/ is grouped by what each part serves; its top level keeps only the modules everything
shares (`compare`, `seeds`, `leakcheck`, `manifest`: the suites and ranks import the first three)
and the entry points (`cli`, `__main__`). Lowest layer first:

    screen      the static screen (ast only)                  imports no other part
    report      a finished run and its forms                  imports no other part
    base        compare, seeds, leakcheck, manifest           screen (manifest checks rule names)
    session     the graded pytest session and its runner      base, report, screen
    suites      the hidden suites (what ranks may see)        base, screen, bench
    bench       the course's benchmarks                       base, report
    pr          the pull-request jobs                         base, report
    worksheets  the worksheets' grading                       base, report
    cli         `python -m grader`                            everything but the suites
    instructor  the instructors' tools (not in a release)     everything but the suites

So a report never imports the session that made it, the session never reaches the instructors'
tools, and nothing but the CLI imports `grader/instructor/` (a student release has no such
folder: an import of it elsewhere would break there). Every `import` counts, those in function
bodies too (`harness/importgraph.py`). No import cycle anywhere: grader/tests/test_imports.py.
"""

from __future__ import annotations

from grader.tests.test_imports import import_graph

# part -> the parts it may import (besides itself)
MAY_IMPORT: dict[str, frozenset[str]] = {
    "screen": frozenset(),
    "report": frozenset(),
    "base": frozenset({"screen"}),
    "session": frozenset({"base", "report", "screen"}),
    "suites": frozenset({"base", "screen", "bench"}),
    "bench": frozenset({"base", "report"}),
    "pr": frozenset({"base", "report"}),
    "worksheets": frozenset({"base", "report"}),
    "cli": frozenset({"base", "report", "screen", "session", "bench", "pr", "worksheets",
                      "instructor"}),
    "instructor": frozenset({"base", "report", "screen", "session", "bench", "pr",
                             "worksheets", "cli"}),
}
# the top level's modules and the part each belongs to; a subpackage is a part of its own
TOP_LEVEL = {"grader": "base", "grader.compare": "base", "grader.seeds": "base",
             "grader.leakcheck": "base", "grader.manifest": "base", "grader.cli": "cli",
             "grader.__main__": "cli"}


def part_of(module: str) -> str | None:
    """The part of grader/ a dotted module name belongs to; None for one in no part."""
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in MAY_IMPORT:
        return parts[1]
    return None


def breaches(graph: dict[str, set[str]]) -> list[str]:
    """Every import across parts that `MAY_IMPORT` does not allow, and every module in no part,
    one line each ("grader.report.x imports grader.session.y: report may not import session")."""
    found = []
    for module in sorted(graph):
        part = part_of(module)
        if part is None:
            found.append(f"{module} is in no part of grader/: put it in a subpackage, or add it "
                         f"to TOP_LEVEL and the layering above")
            continue
        for target in sorted(graph[module]):
            other = part_of(target)
            if other is not None and other != part and other not in MAY_IMPORT[part]:
                found.append(f"{module} imports {target}: {part} may not import {other}")
    return found


def test_the_layering_check_can_fail():
    graph = {"grader.report.render": {"grader.session.runner"},
             "grader.session.runner": {"grader.report.results"},
             "grader.report.results": set(), "grader.bench.student": {"grader.instructor.x"},
             "grader.instructor.x": set(), "grader.screen_rules": set()}
    assert breaches(graph) == [
        "grader.bench.student imports grader.instructor.x: bench may not import instructor",
        "grader.report.render imports grader.session.runner: report may not import session",
        "grader.screen_rules is in no part of grader/: put it in a subpackage, or add it to "
        "TOP_LEVEL and the layering above"]


def test_every_module_of_the_grader_is_in_a_part():
    graph = import_graph()
    assert {"grader.session.plugin", "grader.report.results", "grader.screen.scan"} <= set(graph)
    loose = [m for m in graph if part_of(m) is None]
    assert not loose, (f"modules in no part of grader/ (the top level keeps only "
                       f"{sorted(TOP_LEVEL)}): {loose}")


def test_the_grader_keeps_its_layering():
    found = breaches(import_graph())
    assert not found, ("imports across grader/'s parts that its layering forbids (move what both "
                       "sides need down a layer, see this file's docstring):\n  "
                       + "\n  ".join(found))


def test_only_the_cli_imports_the_instructors_tools():
    graph = import_graph()
    importers = sorted(m for m, targets in graph.items() if part_of(m) != "instructor"
                       and any(part_of(t) == "instructor" for t in targets))
    assert importers == ["grader.cli"], (
        f"{importers} import grader/instructor/, which a student release leaves out: only the "
        f"CLI may, behind a check that the folder is there")
