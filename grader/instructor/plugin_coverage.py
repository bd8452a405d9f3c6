"""Coverage-guided grading of variants: a test that cannot tell a variant from the reference is
not run again for it (selfcheck only).

Selfcheck grades an assignment's solution and many variants of it in one session: the solution
with one public name stubbed (the partial-credit check) and hand-written mutants. A variant
differs from the solution in a few functions; a test whose ranks never ran any of them under the
solution (`harness.calltrace`) runs the same code under the variant, so its outcome is the
solution's. `--coverage-plan PATH` names, in JSON,

    {"trace": "<--impl of the reference>",
     "variants": {"<--impl of a variant>": {"changed": ["ring:ring_shift", ...],
                                            "always": ["ring_shift", ...]}},
     "first": {"<--impl of a mutant>": "<base node id>"}}

or, in place of `"trace"`, `"reference": "<PATH>"`: what an earlier session's traced
implementation ran and whether it passed, per test, as that session wrote it with
`--coverage-out PATH` (the mutation runs trace the solution once, then grade batches of
mutants against that record).

`changed`: the functions the variant changes (`module:qualname` or a bare qualname; a class
stands for its methods). `always`: public names whose tests always run for it (those that
declare them in `@pytest.mark.exercises`), whatever they ran. A variant's test is inferred —
reported passed, with `inferred` set, without running — only when the reference ran first in
this process and passed it, its ranks' record is complete, it ran none of `changed`, and it
declares none of `always`. Anything else runs as usual, so under xdist (another process may
hold the reference's run) nothing is inferred that is not known here.

`first`: the test each mutant's tests start with, the one that caught it last time
(grader/instructor/caught_first.py); the others follow in suite order. A mutant stops at its
first failure, so while that record is current it runs one test instead of every test before it.

Loaded by `grader/session/plugin.py` (`pytest_plugins`) where `grader/instructor/` is present: it
serves selfcheck and mutation runs, so a student release leaves it out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader.session.state import INFERRED, STATE, SessionState, TestOutcome
from harness import calltrace


@dataclass(frozen=True)
class VariantPlan:
    changed: tuple[str, ...]
    always: frozenset[str]


@dataclass
class CoveragePlan:
    """The plan of `--coverage-plan`, and what the reference's tests ran (by base node id)."""

    trace_label: str | None  # the reference graded in this session, or None: `recorded`
    variants: dict[str, VariantPlan]  # implementation label -> its plan
    first: dict[str, str] = field(default_factory=dict)  # label -> base node id run first
    ran: dict[str, calltrace.Coverage] = field(default_factory=dict)
    recorded: dict[str, tuple[calltrace.Coverage, bool]] = field(default_factory=dict)


PLAN = pytest.StashKey[CoveragePlan]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlsys")
    group.addoption(
        "--coverage-plan", default=None, metavar="PATH",
        help="selfcheck: JSON naming the reference --impl to trace (or an earlier session's "
             "record of it) and, per variant --impl, the functions it changes; a variant's "
             "test that ran none of them under the reference is not rerun "
             "(grader/instructor/plugin_coverage.py)")
    group.addoption(
        "--coverage-out", default=None, metavar="PATH",
        help="write what each test of the traced --impl ran, and whether it passed, as JSON")


def read_record(path: Path) -> dict[str, tuple[calltrace.Coverage, bool]]:
    """A `--coverage-out` file: nodeid -> (what its ranks ran, whether it passed)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("expected an object of tests")
    return {str(nodeid): (calltrace.Coverage.from_plain(entry),
                          isinstance(entry, dict) and entry.get("passed") is True)
            for nodeid, entry in data.items()}


def load_plan(path: Path, labels: dict[str, str]) -> CoveragePlan:
    """Read the plan; `labels` maps each --impl argument of the session to its test-id label.
    Raises pytest.UsageError naming what is wrong."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        trace = labels[data["trace"]] if "trace" in data else None
        recorded = read_record(Path(data["reference"])) if trace is None else {}
        variants = {labels[arg]: VariantPlan(tuple(str(c) for c in spec["changed"]),
                                             frozenset(str(a) for a in spec.get("always", ())))
                    for arg, spec in data.get("variants", {}).items()}
        first = {labels[arg]: str(nodeid) for arg, nodeid in data.get("first", {}).items()}
    except KeyError as exc:
        raise pytest.UsageError(f"--coverage-plan {path}: {exc} is not one of the --impl "
                                f"values, or a key is missing") from None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise pytest.UsageError(f"--coverage-plan {path}: {exc}") from None
    return CoveragePlan(trace, variants, first, recorded=recorded)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("coverage_plan")
    if not path:
        return
    state = config.stash[STATE]
    labels = {spec.argument: label for label, spec in state.impls.items()}
    plan = load_plan(Path(path), labels)
    config.stash[PLAN] = plan
    if plan.trace_label is not None:
        calltrace.enable(state.impls[plan.trace_label].text)


def _plan(config: pytest.Config) -> CoveragePlan | None:
    return config.stash.get(PLAN, None)


def _label_and_nodeid(item: pytest.Item) -> tuple[str, str]:
    """(the implementation's label — in a session of one, that one's — and the base node id)."""
    props = dict(item.user_properties)
    label = str(props.get("impl", "")) or next(iter(item.config.stash[STATE].impls))
    return label, str(props.get("base_nodeid", item.nodeid))


def _outcome(state: SessionState, label: str, nodeid: str) -> TestOutcome | None:
    """The recorded outcome of a test of `label` (a session of one keeps it unlabelled)."""
    return state.tests.get((label if state.multi else "", nodeid))


@pytest.hookimpl(trylast=True)  # after pytest has grouped the tests by implementation
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move each planned `first` test to the front of its implementation's tests."""
    plan = _plan(config)
    if plan is None or not plan.first:
        return
    keys = [_label_and_nodeid(item) for item in items]
    for label, nodeid in plan.first.items():
        start = next((i for i, (owner, _) in enumerate(keys) if owner == label), None)
        found = next((i for i, key in enumerate(keys) if key == (label, nodeid)), None)
        if start is None or found is None or found == start:
            continue  # a test no longer there: suite order
        items.insert(start, items.pop(found))
        keys.insert(start, keys.pop(found))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest):
    if _plan(request.config) is None:
        return (yield)
    with calltrace.collecting() as ran:
        try:
            return (yield)
        finally:  # what the fixture's launches ran counts for each test that uses its value
            fixturedef._mlsys_ran = ran  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    plan = _plan(item.config)
    label, nodeid = _label_and_nodeid(item)
    if plan is None or label != plan.trace_label:
        return (yield)
    with calltrace.collecting() as ran:
        try:
            return (yield)
        finally:
            for name in getattr(item, "fixturenames", ()):
                defs = item._fixtureinfo.name2fixturedefs.get(name)  # type: ignore[attr-defined]
                cached = getattr(defs[-1], "_mlsys_ran", None) if defs else None
                if cached is not None:
                    ran.add(cached)
            plan.ran[nodeid] = ran


def inferable(item: pytest.Item) -> bool:
    """Whether this variant's test may take the reference's outcome without running."""
    plan = _plan(item.config)
    label, nodeid = _label_and_nodeid(item)
    variant = plan.variants.get(label) if plan is not None else None
    if plan is None or variant is None:
        return False
    state = item.config.stash[STATE]
    if label in state.stop_first and label in state.failed:
        return False  # not run at all: the plugin's stop-first skip says so
    if plan.trace_label is not None:
        reference = _outcome(state, plan.trace_label, nodeid)
        passed = reference is not None and reference.outcome == "passed" \
            and not reference.inferred
        ran = plan.ran.get(nodeid)
    else:
        ran, passed = plan.recorded.get(nodeid, (None, False))
    if not passed or ran is None:
        return False
    declared = {str(n) for marker in item.iter_markers("exercises") for n in marker.args}
    return not declared & variant.always and not ran.touches(variant.changed)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if inferable(item):
        pytest.skip(INFERRED)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    plan, path = _plan(session.config), session.config.getoption("coverage_out")
    if plan is None or plan.trace_label is None or not path \
            or hasattr(session.config, "workerinput"):
        return
    state = session.config.stash[STATE]
    record = {}
    for nodeid, ran in sorted(plan.ran.items()):
        outcome = _outcome(state, plan.trace_label, nodeid)
        passed = outcome is not None and outcome.outcome == "passed" and not outcome.inferred
        record[nodeid] = {**ran.to_plain(), "passed": passed}
    Path(path).write_text(json.dumps(record, indent=1), encoding="utf-8")
