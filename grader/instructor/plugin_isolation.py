"""Several submissions graded in one session, each as a pull request would be graded alone
(the adversarial corpus: grader/instructor/adversarial.py).

A session of several implementations (`--impl A --impl B ...`, grader/session/plugin.py) runs one
implementation's tests together, then the next's. `--isolated-impls PLAN` (JSON) makes each of
them graded as if alone:

    {"sandbox": "on" | "strict", "screen": "on" | "off",
     "select": {"<--impl>": "<-k expression>", ...}, "report": "<PATH>"}

- the sandbox per implementation: before an implementation's first test, the forkserver of the
  one before (its sandbox's namespace and every process in it) is ended and a fresh sandbox is
  set up in which only this implementation's folder is readable (`harness.sandbox.reset`);
- its own selection: `select` is its `-k` expression, matched against the test as a session of
  its own would name it (without the `impl=` part of the id);
- its own screen gate (`screen` on): a test of an implementation the static screen rejects
  fails before its set-up with "screened: ...", as in a session of its own
  (grader/session/screen_gate.py gates only one-implementation sessions);
- `report`: per implementation, the processes that outlived its launches (found below its
  forkserver before that was ended), and the session's peak resident memory in MiB (the
  pytest process and every process it reaped: its ranks' forkservers and so their ranks).

The core plugin must run with `--sandbox off` (this plugin sets the sandbox up) and no `-k`.
"""

from __future__ import annotations

import json
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader.session.state import STATE

_NEEDS = ("sandbox", "screen", "select", "report")


@dataclass
class Isolation:
    """The plan, and what the session found so far."""

    sandbox: str
    screen: bool
    select: dict[str, str]  # implementation label -> its -k expression
    report: Path
    current: str = ""  # the label whose sandbox is set up
    survivors: dict[str, list[str]] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], Any] = field(default_factory=dict)  # (label, assignment)


ISOLATION = pytest.StashKey[Isolation]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("mlsys").addoption(
        "--isolated-impls", default=None, metavar="PLAN",
        help="grade each --impl as if alone: a sandbox, -k selection and screen gate of its "
             "own (JSON plan; grader/instructor/plugin_isolation.py)")


@pytest.hookimpl(trylast=True)  # after grader/session/plugin.py has made the session's state
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("isolated_impls", None)
    if not path:
        return
    plan = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(plan, dict) or set(_NEEDS) - set(plan):
        raise pytest.UsageError(f"--isolated-impls {path}: needs the keys {list(_NEEDS)}")
    if config.getoption("sandbox") != "off" or config.getoption("keyword"):
        raise pytest.UsageError("--isolated-impls sets the sandbox and selection per "
                                "implementation: run with --sandbox off and no -k")
    state = config.stash[STATE]
    by_argument = {spec.argument: label for label, spec in state.impls.items()}
    unknown = set(plan["select"]) - set(by_argument)
    if unknown:
        raise pytest.UsageError(f"--isolated-impls: {sorted(unknown)[0]} is not an --impl")
    isolation = Isolation(sandbox=str(plan["sandbox"]), screen=plan["screen"] == "on",
                          select={by_argument[a]: str(e) for a, e in plan["select"].items()},
                          report=Path(plan["report"]))
    config.stash[ISOLATION] = isolation
    _switch(config, isolation, next(iter(state.impls)))


def _switch(config: pytest.Config, isolation: Isolation, label: str) -> None:
    """End the sandbox of the implementation graded so far (noting what outlived its launches)
    and set up `label`'s."""
    from grader.session import prepare
    from harness import sandbox

    state = config.stash[STATE]
    found = sandbox.reset()
    if isolation.current:
        isolation.survivors[isolation.current] = _named(found)
    isolation.current = label
    state.sandbox = prepare.enable_sandbox(isolation.sandbox, state.impls[label],
                                                 state.hidden_roots)


def _named(pids: set[int]) -> list[str]:
    from harness import procfs

    return [f"pid {pid}: {' '.join(procfs.cmdline(pid))[:120] or '(no command line)'}"
            for pid in sorted(pids)]


def _label(item: pytest.Item) -> str:
    """The implementation a test grades: its `impl=` parameter, or in a session of one
    implementation (no parameter) that one; "" for an item of none (the screen's report)."""
    from grader.session.screen_gate import ScreenItem

    if isinstance(item, ScreenItem):
        return ""
    state = item.config.stash[STATE]
    label = str(dict(item.user_properties).get("impl", ""))
    return label or ("" if state.multi else next(iter(state.impls)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    isolation = config.stash.get(ISOLATION, None)
    if isolation is None:
        return
    from _pytest.mark.expression import Expression

    compiled = {label: Expression.compile(expr) for label, expr in isolation.select.items()
                if expr.strip()}
    kept, dropped = [], []
    for item in items:
        props = dict(item.user_properties)
        expr = compiled.get(_label(item))
        if expr is None or expr.evaluate(_matcher(item, str(props.get("base_nodeid", "")))):
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _matcher(item: pytest.Item, base_nodeid: str) -> Any:
    """pytest's `-k` matcher for `item` as a session of one implementation names it: its own
    name without the `impl=` part of the parameter id."""
    from _pytest.mark import KeywordMatcher

    found = KeywordMatcher.from_item(item)
    own = base_nodeid.rsplit("::", 1)[-1] if base_nodeid else item.name
    return KeywordMatcher({own if name == item.name else name
                           for name in found._names if not name.startswith("impl=")})


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test (or the screen's gate)
def pytest_runtest_setup(item: pytest.Item) -> None:
    isolation = item.config.stash.get(ISOLATION, None)
    if isolation is None:
        return
    props = dict(item.user_properties)
    label = _label(item)
    if not label:
        return  # a test of no implementation (the screen's report item)
    if label != isolation.current:
        _switch(item.config, isolation, label)
    if isolation.screen:
        _gate(item, isolation, label, str(props.get("assignment", "")))


def _gate(item: pytest.Item, isolation: Isolation, label: str, assignment: str) -> None:
    from grader.session.screen_gate import Screened, _course, screen_impl

    key = (label, assignment)
    if key not in isolation.verdicts:
        course = _course(item.config)
        isolation.verdicts[key] = None if course is None or assignment not in course.ids else \
            screen_impl(item.config.stash[STATE].impls[label], course, assignment,
                        Path(item.config.rootpath))
    verdict = isolation.verdicts[key]
    if verdict is not None and not verdict.passed:
        raise Screened(verdict.reason("screened") + " (this test was not run)")


@pytest.hookimpl(trylast=True)  # after the session's fixtures (its last launches) are torn down
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    isolation = config.stash.get(ISOLATION, None)
    if isolation is None or hasattr(config, "workerinput"):
        return
    from harness import sandbox

    found = sandbox.reset()
    if isolation.current:
        isolation.survivors[isolation.current] = _named(found)
    state = config.stash[STATE]
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    report = {"survivors": {state.impls[label].argument: names
                            for label, names in isolation.survivors.items()},
              "peak_mb": peak_kib // 1024}
    isolation.report.write_text(json.dumps(report), encoding="utf-8")
