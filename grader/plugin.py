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
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import launcher
from harness.errors import NotImplementedInRank
from harness.impl import REPO_ROOT, resolve_impl

REASON_CHARS = 300
NOT_GRADED_HERE = "not graded on this machine"
# Grader modules that rank code uses: imported once by the forkserver, or (the suites, which
# sandboxed ranks cannot see, also when they come from --suites PATH) sent with the rank function.
RANK_PRELOAD = ("grader.compare", "grader.seeds")
RANK_BY_VALUE_PACKAGES = ("grader.suites",)


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


@dataclass
class _State:
    impl: str  # what ranks load: a name, mutant:<id>/<name>, or an absolute folder
    impl_label: str  # the --impl as given, for the reports
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
    group.addoption("--impl", default=None, metavar="IMPL",
                    help="code under test: assignments (default), solutions, mutant:<id>/<name>, "
                         "or a directory laid out like assignments/ (env: MLSYS_IMPL)")
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
    impl = label = config.getoption("impl") or os.environ.get("MLSYS_IMPL") or "assignments"
    _set_variation(config.getoption("seed_shift"), config.getoption("rank_threads"))
    launcher.configure(preload=RANK_PRELOAD, by_value_packages=RANK_BY_VALUE_PACKAGES)
    root = Path(config.rootpath).resolve()
    if impl in ("assignments", "solutions") and root != REPO_ROOT and (root / impl).is_dir():
        # `python -m grader --root OTHER grade`: grade that checkout's folder, not ours.
        impl = str(root / impl)
    try:
        resolve_impl(impl)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    roots = [REPO_ROOT / "grader" / "suites"]
    roots += [Path(p).resolve() for p in config.getoption("hidden_root")]
    _provide_suites_package(roots[1:])
    sandbox_status = _enable_sandbox(config.getoption("sandbox"), impl, roots)
    config.stash[STATE] = _State(impl=impl, impl_label=label,
                                 results_path=config.getoption("mlsys_results"),
                                 progress=config.getoption("mlsys_progress"), hidden_roots=roots,
                                 sandbox=sandbox_status)


def _set_variation(seed_shift: int, rank_threads: int) -> None:
    """Apply --seed-shift and --rank-threads (before any launch starts the forkserver)."""
    from grader import seeds

    try:
        seeds.set_shift(seed_shift)
        launcher.set_rank_threads(rank_threads)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _provide_suites_package(hidden_roots: list[Path]) -> None:
    """Hidden suites import `grader.suites.<id>._common`. A student release ships no
    grader/suites, so when the suites come from elsewhere (`--suites PATH`), make
    `grader.suites` the package whose folder is that path."""
    if (REPO_ROOT / "grader" / "suites").is_dir() or not hidden_roots:
        return
    import types

    import grader

    package = types.ModuleType("grader.suites")
    package.__path__ = [str(p) for p in hidden_roots]
    package.__package__ = "grader.suites"
    sys.modules.setdefault("grader.suites", package)
    grader.suites = sys.modules["grader.suites"]  # type: ignore[attr-defined]


def _enable_sandbox(mode: str, impl: str, hidden_roots: list[Path]) -> dict[str, Any]:
    """Sandbox this process's ranks; hide suites, solutions (unless under test) and git history."""
    from harness import sandbox

    if mode == "off":
        return sandbox.status().to_plain()
    spec = resolve_impl(impl)
    hide = [str(p) for p in hidden_roots] + [str(REPO_ROOT / ".git")]
    if spec.kind not in ("solutions", "mutant"):
        hide.append(str(REPO_ROOT / "solutions"))
    readable = [spec.root] if spec.kind == "dir" else []
    status = sandbox.enable(sandbox.SandboxConfig(hide=tuple(hide), readable=tuple(readable)))
    if mode == "strict" and status.mode != "full":
        raise pytest.UsageError(f"{status.summary}; --sandbox strict needs the full sandbox")
    return status.to_plain()


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
        return first[:REASON_CHARS], "not_implemented"
    if isinstance(exc, NotImplementedError):
        return f"not implemented yet: {first}"[:REASON_CHARS], "not_implemented"
    if isinstance(exc, AssertionError):
        return (first or "assertion failed")[:REASON_CHARS], "assertion"
    return f"{type(exc).__name__}: {first}"[:REASON_CHARS], "error"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    from grader.compare import take_margins  # torch: only once a test ran

    margins = take_margins()
    if margins:
        worst = max(margins, key=lambda m: m.ratio)
        report.user_properties = [*report.user_properties, ("margin", worst.ratio),
                                  ("margin_at", worst.what[:REASON_CHARS])]
    if report.failed:
        reason, kind = short_reason(call.excinfo)
        report.user_properties = [*report.user_properties, ("reason", reason),
                                  ("failure_kind", kind)]
    elif report.skipped and call.excinfo is not None:
        text = str(getattr(call.excinfo.value, "msg", "") or call.excinfo.value)
        report.user_properties = [*report.user_properties, ("reason", text[:REASON_CHARS])]
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
        return str(longrepr[2]).removeprefix("Skipped: ")[:REASON_CHARS]
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
    data: dict[str, Any] = {
        "impl": state.impl_label,
        "sandbox": state.sandbox,
        "tests": [asdict(t) for t in state.tests.values()],
        "collection_errors": list(state.collection_errors),
        "exitstatus": int(exitstatus),
    }
    path = Path(state.results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> str:
    """The --impl of this run (assignments, solutions, mutant:<id>/<name> or a directory)."""
    return pytestconfig.stash[STATE].impl


@pytest.fixture(scope="session")
def launch(impl: str):
    """`harness.launch` with `impl` bound to this run's --impl."""
    from harness.launcher import launch as _launch

    return functools.partial(_launch, impl=impl)
