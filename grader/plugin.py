"""pytest plugin of mlsys-labs: points, --impl, the `launch` fixture, and raw results.

Shaped like pytest's own plugins: options and markers registered here, small pure helpers, state
in `config.stash`, one wrapper hook for reports. Works under pytest-xdist: workers attach points
and reasons to each report's `user_properties`; the controller collects and writes them.

One session can grade several implementations (`--impl A --impl B ...`): the pytest process
never imports code under test (it only names it to the ranks), so every graded test is
parametrized over the implementations (`test_x[impl=mutant:<id>/<name>]`),
with session scope so that pytest runs one implementation's tests together and rebuilds the
module-scoped fixtures (the shared launches) for each. Results are kept per implementation under
the test ids a one-implementation session would have, and written as one run each.
`--stop-first IMPL` stops that implementation at its first failure (its other tests are "not
run"), as `-x` does for a session of its own.

    @pytest.mark.points(5)
    def test_sum(launch):
        result = launch(rank_sum, world_size=4)
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader import reasons, session_setup
from grader.results import NOT_GRADED_HERE, RunResult, TestResult, clip_reason
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
    exercises: tuple[str, ...] = ()  # the public names it calls (@pytest.mark.exercises)

    def result(self) -> TestResult:
        return TestResult(
            nodeid=self.nodeid, name=self.name, assignment=self.assignment,
            visibility=self.visibility, points=self.points, outcome=self.outcome,
            reason=self.reason, not_implemented=self.not_implemented,
            not_graded_here=self.not_graded_here, duration=self.duration, margin=self.margin,
            margin_at=self.margin_at, exercises=self.exercises)


@dataclass
class _State:
    impls: dict[str, ImplSpec]  # test-id label -> the --impl, resolved once; in --impl order
    results_path: str | None
    progress: bool
    hidden_roots: list[Path]
    stop_first: frozenset[str] = frozenset()  # labels that stop at their first failure
    sandbox: dict[str, Any] = field(default_factory=dict)
    tests: dict[tuple[str, str], TestOutcome] = field(default_factory=dict)  # (label, nodeid)
    not_run: dict[str, list[str]] = field(default_factory=dict)  # label -> node ids
    failed: dict[str, str] = field(default_factory=dict)  # label -> first failing node id
    collection_errors: list[str] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    finished: int = 0  # tests whose teardown was reported (under xdist, others still run)

    @property
    def impl(self) -> ImplSpec:
        """The first (in a one-implementation session, the only) implementation."""
        return next(iter(self.impls.values()))

    @property
    def multi(self) -> bool:
        return len(self.impls) > 1


STATE = pytest.StashKey[_State]()
_PLUGIN_LOADED = time.perf_counter()  # the session's clock: timings are measured from here
NOT_RUN = "not run: this implementation already failed"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlsys", "mlsys-labs grading")
    group.addoption("--impl", action="append", default=None, metavar="IMPL",
                    help=IMPL_HELP + "; env: MLSYS_IMPL; repeat it to grade several "
                         "implementations in one session")
    group.addoption("--stop-first", action="append", default=[], metavar="IMPL",
                    help="stop grading IMPL (one of the --impl values) at its first failure; "
                         "its remaining tests are reported as not run")
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
    config.addinivalue_line("markers", "no_tolerance: compares no value with a tolerance; "
                                       "selfcheck's margin runs leave it out")
    config.addinivalue_line("markers", "exercises(*names): the public functions or classes of "
                                       "the module under test that a test calls, e.g. "
                                       "@pytest.mark.exercises(\"ring_all_reduce\")")
    session_setup.set_variation(config.getoption("seed_shift"), config.getoption("rank_threads"))
    session_setup.configure_ranks()
    texts = config.getoption("impl") or [os.environ.get("MLSYS_IMPL") or "assignments"]
    specs = [session_setup.implementation(text, Path(config.rootpath)) for text in texts]
    impls = {impl_label(spec, i): spec for i, spec in enumerate(specs)}
    if len({spec.text for spec in specs}) != len(specs):
        raise pytest.UsageError(f"--impl given twice for the same implementation: {texts}")
    unknown = set(config.getoption("stop_first")) - {s.text for s in specs}
    if unknown:
        raise pytest.UsageError(f"--stop-first {sorted(unknown)[0]} is not one of the --impl "
                                f"values {texts}")
    stop_first = frozenset(label for label, spec in impls.items()
                           if spec.text in config.getoption("stop_first"))
    mode = config.getoption("sandbox")
    if len(specs) > 1 and mode != "off":
        raise pytest.UsageError("--sandbox grades one implementation per session: drop the "
                                "extra --impl, or run without --sandbox (instructors only)")
    roots = [REPO_ROOT / "grader" / "suites"]
    roots += [Path(p).resolve() for p in config.getoption("hidden_root")]
    session_setup.provide_suites_package(roots[1:])
    sandbox_status = session_setup.enable_sandbox(mode, specs[0], roots)
    config.stash[STATE] = _State(impls=impls, results_path=config.getoption("mlsys_results"),
                                 progress=config.getoption("mlsys_progress"), hidden_roots=roots,
                                 stop_first=stop_first, sandbox=sandbox_status)


def impl_label(spec: ImplSpec, index: int) -> str:
    """How an implementation appears in test ids: its name, or `dir<index>` for a folder."""
    return f"dir{index}" if spec.kind == "dir" else spec.text


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = metafunc.config.stash[STATE]
    if state.multi and "impl" in metafunc.fixturenames:
        # Session scope: pytest groups the tests of one implementation together, so each
        # module-scoped fixture (a shared launch) is built once per implementation.
        metafunc.parametrize("impl", list(state.impls.values()),
                             ids=[f"impl={label}" for label in state.impls], scope="session")


def base_nodeid(item: pytest.Item) -> tuple[str, str]:
    """(implementation label, the node id without it) of a collected test."""
    callspec = getattr(item, "callspec", None)
    state = item.config.stash[STATE]
    if not state.multi or callspec is None or "impl" not in callspec.params:
        return "", item.nodeid
    label = next(k for k, v in state.impls.items() if v is callspec.params["impl"])
    tag, ids = f"impl={label}", callspec.id
    if ids == tag:
        rest = ""
    elif ids.startswith(tag + "-"):
        rest = ids[len(tag) + 1:]
    elif ids.endswith("-" + tag):
        rest = ids[:-len(tag) - 1]
    else:
        rest = ids.replace(f"-{tag}-", "-", 1)
    head = item.nodeid[:-len(ids) - 2]  # drop "[<ids>]"
    return label, f"{head}[{rest}]" if rest else head


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
        label, nodeid = base_nodeid(item)
        exercised = tuple(dict.fromkeys(str(name) for marker in item.iter_markers("exercises")
                                        for name in marker.args))
        item.user_properties.extend([("points", points or 0), ("assignment", assignment),
                                     ("visibility", visibility), ("impl", label),
                                     ("base_nodeid", nodeid), ("exercises", exercised)])
    if missing:
        listed = "\n  ".join(missing[:20])
        raise pytest.UsageError(f"grading tests without @pytest.mark.points(n) "
                                f"({len(missing)}):\n  {listed}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[STATE]
    label = dict(item.user_properties).get("impl", "")
    if label in state.stop_first and label in state.failed:
        pytest.skip(NOT_RUN)
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"{NOT_GRADED_HERE}: needs a CUDA GPU")


# -- reasons ----------------------------------------------------------------------------------
def short_reason(excinfo: pytest.ExceptionInfo[BaseException] | None,
                 hidden_roots: Sequence[Path] = (), path: Path | None = None) -> tuple[str, str]:
    """(one line of the failure, its kind: "not_implemented" | "assertion" | "error").

    Built by `grader.reasons`: the first line, scrubbed of anything naming the hidden suites
    under `hidden_roots` (those of the test file `path`'s assignment), capped. Only this line
    reaches students for hidden tests.
    """
    exc = excinfo.value if excinfo is not None else None
    return reasons.failure_reason(exc, hidden_roots, path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    from grader.compare import take_margins  # torch: only once a test ran

    margins = take_margins()
    if margins:
        worst = max(margins, key=lambda m: m.ratio)
        report.user_properties = [*report.user_properties, ("margin", worst.ratio),
                                  ("margin_at", clip_reason(worst.what))]
    for clock, prop in (("spent", "launch_s"), ("forkserver_s", "forkserver_s")):
        if clock in _launch_clock:
            report.user_properties = [*report.user_properties, (prop, _launch_clock.pop(clock))]
    if report.failed:
        reason, kind = short_reason(call.excinfo, item.config.stash[STATE].hidden_roots,
                                    Path(item.path))
        report.user_properties = [*report.user_properties, ("reason", reason),
                                  ("failure_kind", kind)]
        label = str(dict(item.user_properties).get("impl", ""))
        item.config.stash[STATE].failed.setdefault(label, report.nodeid)
    elif report.skipped and call.excinfo is not None:
        text = str(getattr(call.excinfo.value, "msg", "") or call.excinfo.value)
        report.user_properties = [*report.user_properties, ("reason", reasons.skip_reason(
            text, item.config.stash[STATE].hidden_roots, Path(item.path)))]
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
    if state is not None:
        for key in ("launch_s", "forkserver_s"):
            if isinstance(props.get(key), float):
                state.timing[key] = state.timing.get(key, 0.0) + props[key]
    if "points" not in props or state is None:
        return
    label, nodeid = str(props.get("impl", "")), str(props.get("base_nodeid", report.nodeid))
    if report.skipped and _skip_text(report) == NOT_RUN:
        state.not_run.setdefault(label, []).append(nodeid)
    if nodeid in state.not_run.get(label, ()):
        return
    outcome = state.tests.get((label, nodeid))
    if outcome is None:
        outcome = TestOutcome(nodeid=nodeid, name=nodeid.split("::", 1)[-1],
                              assignment=props["assignment"], visibility=props["visibility"],
                              points=int(props["points"]),
                              exercises=tuple(props.get("exercises", ())))
        state.tests[(label, nodeid)] = outcome
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
            _print_progress(state, outcome, label)


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return clip_reason(str(longrepr[2]).removeprefix("Skipped: "))
    return ""


def _print_progress(state: _State, outcome: TestOutcome, label: str) -> None:
    done = state.finished
    score = outcome.points if outcome.outcome == "passed" else 0
    status = {"passed": "ok", "skipped": "skip"}.get(outcome.outcome, "FAIL")
    who = f"{label} " if state.multi else ""
    line = (f"[{done:>4}] {who}{outcome.assignment or '-':<18} {outcome.name[:52]:<52} "
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
    timing = {**state.timing, "session": time.perf_counter() - _PLUGIN_LOADED}
    runs = []
    for label, spec in state.impls.items():
        # A test that does not depend on the implementation (none of the graded ones should)
        # was run once, without a label: it counts for every implementation.
        tests = [t.result() for (owner, _), t in state.tests.items() if owner in (label, "")]
        runs.append(RunResult(spec.text, tuple(tests), tuple(state.collection_errors),
                              int(exitstatus), sandbox, tuple(state.not_run.get(label, [])),
                              tuple(timing.items())))
    if state.multi:
        RunResult.save_all(runs, Path(state.results_path))
    else:
        runs[0].save(Path(state.results_path))


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash[STATE]
    state.timing["collected"] = time.perf_counter() - _PLUGIN_LOADED


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> ImplSpec:
    """The --impl of this run, resolved (`harness.impl.ImplSpec`: kind, root, text)."""
    return pytestconfig.stash[STATE].impl


_launch_clock: dict[str, float] = {}  # seconds spent in launches since the last report


@pytest.fixture(scope="session")
def launch(impl: ImplSpec):
    """`harness.launch` with `impl` bound to this run's --impl (timed, for the session's
    breakdown of where its time goes)."""
    from harness import forkserver
    from harness.launcher import launch as _launch

    if not forkserver.running():
        # Start the forkserver with a launch that does nothing (the rank function is the
        # builtin `id`, called on ctx), so the breakdown can tell its cost from the tests'.
        start = time.perf_counter()
        _launch(id, 1, impl=impl, timeout=120.0)
        _launch_clock["forkserver_s"] = time.perf_counter() - start

    @functools.wraps(_launch)
    def timed_launch(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return _launch(*args, impl=impl, **kwargs)
        finally:
            _launch_clock["spent"] = _launch_clock.get("spent", 0.0) + time.perf_counter() - start

    return timed_launch
