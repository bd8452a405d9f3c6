"""Per-test outcomes, from the reports to the results file.

On every process (an xdist worker or a session of its own), one wrapper hook puts onto each
report what the controller cannot see: the failure's short reason (`grader.session.reasons`), the
worst tolerance margin and the time spent in launches. On the controller, the reports become one
`TestOutcome` per test and implementation (a `test_end` event each, grader/session/events.py),
and at the end one `RunResult` per implementation is written to `--mlsys-results`.

Loaded by `grader/session/plugin.py` (`pytest_plugins`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from grader.report.results import NOT_GRADED_HERE, RunResult, clip_reason
from grader.session import reasons
from grader.session.events import close, controller_state, emit, label_of
from grader.session.state import (
    INFERRED,
    NOT_RUN,
    PLUGIN_LOADED,
    STATE,
    SessionState,
    TestOutcome,
    take_launch_times,
)


# -- reasons ----------------------------------------------------------------------------------
def short_reason(excinfo: pytest.ExceptionInfo[BaseException] | None,
                 hidden_roots: Sequence[Path] = (), path: Path | None = None) -> tuple[str, str]:
    """(one line of the failure, its kind: "not_implemented" | "assertion" | "error").

    Built by `grader.session.reasons`: the first line, scrubbed of anything naming the hidden suites
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
    for clock, seconds in take_launch_times().items():
        prop = "launch_s" if clock == "spent" else clock  # `launches`: a count
        report.user_properties = [*report.user_properties, (prop, seconds)]
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


_session_state: dict[str, SessionState] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _session_state["state"] = session.config.stash[STATE]
    state = controller_state(session.config)
    if state is not None:
        emit(state, "session_start", impls=list(state.impls))


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    state = _session_state.get("state")
    if state is not None and state.events is not None:
        label, index = label_of(state, nodeid)
        emit(state, "test_start", nodeid=nodeid, impl=label, index=index)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    state = _session_state.get("state")
    if report.failed and state is not None:
        state.collection_errors.append(
            f"{report.nodeid}: {str(report.longrepr).strip()[-800:]}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props: dict[str, Any] = dict(report.user_properties)
    state = _session_state.get("state")
    if state is not None:
        for key in ("launch_s", "launches", "forkserver_s"):
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
                              exercises=tuple(props.get("exercises", ())),
                              order=int(props.get("order", 0)))
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
    elif report.skipped and _skip_text(report) == INFERRED:
        # passed, as the reference did (grader/instructor/plugin_coverage.py)
        outcome.inferred = True
    elif report.skipped and outcome.outcome == "passed":
        outcome.outcome = "skipped"
        outcome.reason = str(props.get("reason", "")) or _skip_text(report)
        outcome.not_graded_here = NOT_GRADED_HERE in outcome.reason
    outcome.launches += int(props.get("launches", 0) or 0)
    outcome.launch_s += float(props.get("launch_s", 0.0) or 0.0)
    if report.when == "teardown":
        state.finished += 1
        _emit_end(state, outcome, label, report.nodeid)


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return clip_reason(str(longrepr[2]).removeprefix("Skipped: "))
    return ""


def _emit_end(state: SessionState, outcome: TestOutcome, label: str, nodeid: str) -> None:
    """The test's `test_end` event (and with `--mlsys-progress` its line)."""
    if state.events is None and not state.progress:
        return
    index = list(state.impls).index(label) if label in state.impls else -1
    emit(state, "test_end", nodeid=nodeid, impl=label, index=index,
         assignment=outcome.assignment, name=outcome.name, points=outcome.points,
         score=outcome.points if outcome.outcome == "passed" else 0, outcome=outcome.outcome,
         reason=outcome.reason, done=state.finished, launches=outcome.launches,
         launch_s=round(outcome.launch_s, 3))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash[STATE]
    if _is_worker(config):
        return
    if state.results_path:
        _write_results(state, int(exitstatus), Path(state.results_path))
    emit(state, "session_end", exitstatus=int(exitstatus),
         launches=int(state.timing.get("launches", 0)))
    close(state)


def _write_results(state: SessionState, exitstatus: int, path: Path) -> None:
    sandbox = tuple((str(k), str(v)) for k, v in state.sandbox.items()
                    if isinstance(v, (str, int, float, bool)))
    timing = {**state.timing, "session": time.perf_counter() - PLUGIN_LOADED}
    runs = []
    for label, spec in state.impls.items():
        # A test that does not depend on the implementation (none of the graded ones should)
        # was run once, without a label: it counts for every implementation.
        tests = sorted((t.result() for (owner, _), t in state.tests.items()
                        if owner in (label, "")), key=lambda t: t.order)  # the suite's order
        runs.append(RunResult(spec.text, tuple(tests), tuple(state.collection_errors),
                              int(exitstatus), sandbox, tuple(state.not_run.get(label, [])),
                              tuple(timing.items())))
    if state.multi:
        RunResult.save_all(runs, path)
    else:
        runs[0].save(path)


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash[STATE]
    state.timing["collected"] = time.perf_counter() - PLUGIN_LOADED
