"""pytest plugin of mlsys-labs: points, --impl, the `launch` fixture, and raw results.

Shaped like pytest's own plugins: options and markers registered here, small pure helpers, state
in `config.stash`, one wrapper hook for reports. Works under pytest-xdist: workers attach points
and reasons to each report's `user_properties`; the controller collects and writes them.

    @pytest.mark.points(5)
    def test_sum(launch):
        result = launch(rank_sum, world_size=4)
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader import session_setup
from grader.results import NOT_GRADED_HERE, RunResult, TestResult, clip_reason
from harness.errors import NotImplementedInRank
from harness.impl import IMPL_HELP, REPO_ROOT, ImplSpec

# The static screen of the code under test, a 0-point test per assignment (grader/screen.py).
pytest_plugins = ["grader.screen_plugin"]


@dataclass
class TestOutcome:
    nodeid: str
    name: str
    assignment: str
    visibility: str
    points: int
    outcome: str = "passed"
    reason: str = ""
    not_implemented: bool = False
    not_graded_here: bool = False
    duration: float = 0.0
    margin: float | None = None  # worst observed error / tolerance of its comparisons
    margin_at: str = ""  # which comparison that was

    def result(self) -> TestResult:
        return TestResult(
            nodeid=self.nodeid, name=self.name, assignment=self.assignment,
            visibility=self.visibility, points=self.points, outcome=self.outcome,
            reason=self.reason, not_implemented=self.not_implemented,
            not_graded_here=self.not_graded_here, duration=self.duration, margin=self.margin,
            margin_at=self.margin_at)


@dataclass
class _State:
    impl: ImplSpec  # the --impl of this session, resolved once
    results_path: str | None
    progress: bool
    hidden_roots: list[Path]
    sandbox: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, TestOutcome] = field(default_factory=dict)
    collection_errors: list[str] = field(default_factory=list)
    finished: int = 0  # tests whose teardown was reported (under xdist, others still run)


STATE = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlsys", "mlsys-labs grading")
    group.addoption("--impl", default=os.environ.get("MLSYS_IMPL") or "assignments",
                    metavar="IMPL", help=IMPL_HELP + "; env: MLSYS_IMPL")
    group.addoption("--graded", action="store_true",
                    help="require @pytest.mark.points on every collected test")
    group.addoption("--hidden-root", action="append", default=[], metavar="DIR",
                    help="a folder of hidden suites laid out as DIR/<id>/test_*.py")
    group.addoption("--mlsys-results", default=None, metavar="PATH",
                    help="write per-test outcomes, points and reasons as JSON to PATH")
    group.addoption("--mlsys-progress", action="store_true",
                    help="print one line per finished test with its points")
    group.addoption("--sandbox", choices=("off", "on", "strict"), default="off",
                    help="run ranks sandboxed (harness/sandbox.py); strict: fail unless the "
                         "full sandbox could be set up")
    group.addoption("--seed-shift", type=int, default=0, metavar="K",
                    help="shift every seed the suites draw inputs from (grader/seeds.py); "
                         "selfcheck's margin runs use 1, 2, ...")
    group.addoption("--rank-threads", type=int, default=1, metavar="N",
                    help="torch threads per rank (default 1; selfcheck's margin runs try 2)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): points a grading test is worth, "
                                       "e.g. @pytest.mark.points(5)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with a reason on CPU")
    session_setup.set_variation(config.getoption("seed_shift"), config.getoption("rank_threads"))
    session_setup.configure_ranks()
    impl = session_setup.implementation(config.getoption("impl"), Path(config.rootpath))
    roots = [REPO_ROOT / "grader" / "suites"]
    roots += [Path(p).resolve() for p in config.getoption("hidden_root")]
    session_setup.provide_suites_package(roots[1:])
    sandbox_status = session_setup.enable_sandbox(config.getoption("sandbox"), impl, roots)
    config.stash[STATE] = _State(impl=impl, results_path=config.getoption("mlsys_results"),
                                 progress=config.getoption("mlsys_progress"), hidden_roots=roots,
                                 sandbox=sandbox_status)


# -- classification -------------------------------------------------------------------------
def classify(path: Path, hidden_roots: list[Path]) -> tuple[str, str]:
    """(assignment id, "public" | "hidden") of a test file; ("", "") for the project's tests."""
    path = path.resolve()
    for root in hidden_roots:
        if path.is_relative_to(root) and len(path.relative_to(root).parts) > 1:
            return path.relative_to(root).parts[0], "hidden"
    public_root = REPO_ROOT / "assignments"
    if path.is_relative_to(public_root) and len(path.relative_to(public_root).parts) > 1:
        return path.relative_to(public_root).parts[0], "public"
    return "", ""


def points_of(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker("points")
    if marker is None:
        return None
    value = marker.args[0] if marker.args else marker.kwargs.get("n")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise pytest.UsageError(f"{item.nodeid}: points must be a non-negative int, "
                                f"e.g. @pytest.mark.points(5), not {value!r}")
    return value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE]
    missing = []
    for item in items:
        assignment, visibility = classify(Path(item.path), state.hidden_roots)
        points = points_of(item)
        if points is None and (visibility or config.getoption("graded")):
            missing.append(item.nodeid)
            continue
        item.user_properties.extend([("points", points or 0), ("assignment", assignment),
                                     ("visibility", visibility)])
    if missing:
        listed = "\n  ".join(missing[:20])
        raise pytest.UsageError(f"grading tests without @pytest.mark.points(n) "
                                f"({len(missing)}):\n  {listed}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"{NOT_GRADED_HERE}: needs a CUDA GPU")


# -- reasons ----------------------------------------------------------------------------------
def short_reason(excinfo: pytest.ExceptionInfo[BaseException] | None) -> tuple[str, str]:
    """(first line of the failure, its kind: "not_implemented" | "assertion" | "error").

    Only this first line reaches students for hidden tests: never the source or the inputs.
    """
    if excinfo is None:
        return "", "error"
    exc = excinfo.value
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, NotImplementedInRank):
        return clip_reason(first), "not_implemented"
    if isinstance(exc, NotImplementedError):
        return clip_reason(f"not implemented yet: {first}"), "not_implemented"
    if isinstance(exc, AssertionError):
        return clip_reason(first or "assertion failed"), "assertion"
    return clip_reason(f"{type(exc).__name__}: {first}"), "error"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    from grader.compare import take_margins  # torch: only once a test ran

    margins = take_margins()
    if margins:
        worst = max(margins, key=lambda m: m.ratio)
        report.user_properties = [*report.user_properties, ("margin", worst.ratio),
                                  ("margin_at", clip_reason(worst.what))]
    if report.failed:
        reason, kind = short_reason(call.excinfo)
        report.user_properties = [*report.user_properties, ("reason", reason),
                                  ("failure_kind", kind)]
    elif report.skipped and call.excinfo is not None:
        text = str(getattr(call.excinfo.value, "msg", "") or call.excinfo.value)
        report.user_properties = [*report.user_properties, ("reason", clip_reason(text))]
    return report


# -- collection on the controller -------------------------------------------------------------
def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


_session_state: dict[str, _State] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _session_state["state"] = session.config.stash[STATE]


def pytest_collectreport(report: pytest.CollectReport) -> None:
    state = _session_state.get("state")
    if report.failed and state is not None:
        state.collection_errors.append(
            f"{report.nodeid}: {str(report.longrepr).strip()[-800:]}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props: dict[str, Any] = dict(report.user_properties)
    state = _session_state.get("state")
    if "points" not in props or state is None:
        return
    outcome = state.tests.get(report.nodeid)
    if outcome is None:
        outcome = TestOutcome(nodeid=report.nodeid, name=report.nodeid.split("::", 1)[-1],
                              assignment=props["assignment"], visibility=props["visibility"],
                              points=int(props["points"]))
        state.tests[report.nodeid] = outcome
    outcome.duration += report.duration
    margin = props.get("margin")
    if isinstance(margin, (int, float)) and (outcome.margin is None or margin > outcome.margin):
        outcome.margin, outcome.margin_at = float(margin), str(props.get("margin_at", ""))
    if report.failed and outcome.outcome not in ("failed", "error"):
        # A launch failing inside a shared fixture is the code's failure, not the suite's.
        assertion_like = props.get("failure_kind") in ("assertion", "not_implemented")
        outcome.outcome = "failed" if report.when == "call" or assertion_like else "error"
        outcome.reason = str(props.get("reason", ""))
        outcome.not_implemented = props.get("failure_kind") == "not_implemented"
    elif report.skipped and outcome.outcome == "passed":
        outcome.outcome = "skipped"
        outcome.reason = str(props.get("reason", "")) or _skip_text(report)
        outcome.not_graded_here = NOT_GRADED_HERE in outcome.reason
    if report.when == "teardown":
        state.finished += 1
        if state.progress:
            _print_progress(state, outcome)


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return clip_reason(str(longrepr[2]).removeprefix("Skipped: "))
    return ""


def _print_progress(state: _State, outcome: TestOutcome) -> None:
    done = state.finished
    score = outcome.points if outcome.outcome == "passed" else 0
    status = {"passed": "ok", "skipped": "skip"}.get(outcome.outcome, "FAIL")
    line = (f"[{done:>4}] {outcome.assignment or '-':<18} {outcome.name[:52]:<52} "
            f"{score:>3}/{outcome.points:<3} {status}")
    if outcome.outcome != "passed" and outcome.reason:
        line += f"  {outcome.reason[:80]}"
    print(line, flush=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash[STATE]
    if _is_worker(config) or not state.results_path:
        return
    sandbox = tuple((str(k), str(v)) for k, v in state.sandbox.items()
                    if isinstance(v, (str, int, float, bool)))
    run = RunResult(state.impl.text, tuple(t.result() for t in state.tests.values()),
                    tuple(state.collection_errors), int(exitstatus), sandbox)
    run.save(Path(state.results_path))


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> ImplSpec:
    """The --impl of this run, resolved (`harness.impl.ImplSpec`: kind, root, text)."""
    return pytestconfig.stash[STATE].impl


@pytest.fixture(scope="session")
def launch(impl: ImplSpec):
    """`harness.launch` with `impl` bound to this run's --impl."""
    from harness.launcher import launch as _launch

    return functools.partial(_launch, impl=impl)
