"""The static screen (`grader/screen/scan.py`) as a graded test of its own, and its gate.

Loaded by `grader/session/plugin.py` (`pytest_plugins`). After collection and deselection, one item
named `screen`, worth 0 points, is put in front of each assignment's tests. It passes when the
screen finds nothing in the implementation under test; otherwise it fails with the first finding
("screen: ring.py:12 calls eval(); the grader runs no dynamic code — rule no-dynamic-code"), and
every other test of that assignment fails before its set-up (no fixture runs, no rank starts)
with "screened: …" and scores 0. The screen runs in the pytest process on the files' text; it
never imports them.

Mutants (`--impl mutant:<id>/<name>`) are screened as what they run (the solution with the
mutant's replacements) but never gated: a mutant must be caught by the suites, and selfcheck
would otherwise credit the screen with catching one (a mutant may call `_get_backend` on
purpose). `--screen off` (instructor-only; the trusted workflow never passes
it) turns the gate off too, so `grader adversarial` can prove the defences behind the screen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.manifest import DEFAULT_PATH, Course, ManifestError, load_manifest
from grader.screen.scan import Verdict, screen

SCREEN_TEST = "screen"  # the item's name: `<first test file of the assignment>::screen`


class Screened(AssertionError):
    """A test of an assignment whose implementation the screen rejected (fails as an assertion,
    so the report shows the reason, not an error)."""


class ScreenItem(pytest.Item):
    """The screen of one assignment, reported as a 0-point test."""

    def __init__(self, *, verdict: Verdict, gated: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.verdict = verdict
        self.gated = gated

    def runtest(self) -> None:
        if self.gated and not self.verdict.passed:
            raise Screened(self.verdict.report())

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"static screen of {self.verdict.assignment}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        return str(excinfo.value)


_verdicts: dict[str, Verdict] = {}  # assignment -> verdict, when gated and rejected


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("mlsys").addoption(
        "--screen", choices=("on", "off"), default="on",
        help="the static screen of the code under test (grader/screen/scan.py): on = a failing "
             "screen stops its assignment's other tests; off = reported only (default: on)")


def _course(config: pytest.Config) -> Course | None:
    path = Path(config.rootpath) / "assignments" / "course.toml"
    try:
        return load_manifest(path if path.is_file() else DEFAULT_PATH)
    except ManifestError:
        return None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the screen is always graded
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from grader.session.plugin import STATE, classify

    state = config.stash[STATE]
    course = _course(config)
    if course is None:
        return
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        assignment, visibility = classify(Path(item.path), state.hidden_roots)
        if visibility and assignment in course.ids and assignment not in first:
            first[assignment] = index
    # A session of several implementations (selfcheck's) grades instructor code: screened for
    # the report, never gated.
    gated = (config.getoption("screen") == "on" and state.impl.kind != "mutant"
             and not state.multi)
    for assignment, index in sorted(first.items(), key=lambda kv: -kv[1]):
        verdict = screen_impl(state.impl, course, assignment, Path(config.rootpath))
        parent = items[index].parent
        assert parent is not None
        # Its own node id, never under a hidden test file: reports show node ids.
        item = ScreenItem.from_parent(parent, name=SCREEN_TEST, verdict=verdict, gated=gated,
                                      nodeid=f"assignments/{assignment}::{SCREEN_TEST}")
        item.user_properties.extend([("points", 0), ("assignment", assignment),
                                     ("visibility", "public")])
        items.insert(index, item)
        if gated and not verdict.passed:
            _verdicts[assignment] = verdict


def screen_impl(impl: Any, course: Course, assignment_id: str, course_root: Path) -> Verdict:
    """The screen of `assignment_id` under the resolved `--impl` (a `harness.impl.ImplSpec`)."""
    from harness.impl import module_path

    assignment = course.get(assignment_id)
    modules = assignment.modules + assignment.extra_editable
    mutant = None
    if impl.kind == "mutant" and impl.mutant_assignment == assignment_id:
        for module in modules:
            path = module_path(impl, assignment_id, module)
            if path.parent.name == "mutants":
                mutant = (path, module)
    return screen(impl.kind, Path(impl.root), assignment_id, modules, assignment.screen_allow,
                  course_root, mutant)


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test is set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    if isinstance(item, ScreenItem) or not _verdicts:
        return
    props = dict(item.user_properties)
    verdict = _verdicts.get(str(props.get("assignment", "")))
    if verdict is not None:
        raise Screened(verdict.reason("screened") + " (this test was not run)")
