"""pytest plugin of mlsys-labs: points, --impl, the `launch` fixture, and raw results.

Shaped like pytest's own plugins: options and markers registered here, small pure helpers, state
in `config.stash` (`grader/session/state.py`), one wrapper hook for reports. Works under
pytest-xdist: workers attach points and reasons to each report's `user_properties`; the
controller collects and writes them.

This module registers the options and markers, resolves `--impl` and parametrizes over it, and
classifies and checks what was collected. It loads the rest: `grader/session/outcomes.py` (from
reports to the results file), `grader/session/launch.py` (the `impl` and
`launch` fixtures) and `grader/session/screen_gate.py` (the static screen as a test).

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

import os
from pathlib import Path

import pytest

from grader.report.results import NOT_GRADED_HERE
from grader.session import events, prepare
from grader.session.state import NOT_RUN, STATE, SessionState
from harness.impl import IMPL_HELP, REPO_ROOT, ImplSpec

# The plugins this one loads: the static screen of the code under test, a 0-point test per
# assignment (grader/screen/scan.py); per-test outcomes into the results file; the fixtures; the
# selfcheck's coverage-guided grading of variants, where grader/instructor/ is (not in a release).
pytest_plugins = ["grader.session.screen_gate", "grader.session.outcomes", "grader.session.launch"]
if (Path(__file__).resolve().parents[1] / "instructor" / "plugin_coverage.py").is_file():
    pytest_plugins.append("grader.instructor.plugin_coverage")


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
    group.addoption("--mlsys-events", default=None, metavar="fd:N|PATH",
                    help="write the session's events as JSON lines to descriptor N or PATH "
                         "(grader/session/events.py)")
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
    # The usage checks come first: they need no torch, so a mistyped command line is answered
    # at once rather than after the imports below (seconds).
    texts = config.getoption("impl") or [os.environ.get("MLSYS_IMPL") or "assignments"]
    specs = [prepare.implementation(text, Path(config.rootpath)) for text in texts]
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
    if config.pluginmanager.is_blocked("terminal"):
        # Nobody reads a test's traceback here (`-p no:terminal`: grading sessions write
        # results.json, whose reasons come from the exception itself), and pytest's default
        # style parses the source file of every frame with `ast` to show its statement:
        # a fifth of selfcheck's session CPU went to tracebacks of failing mutants. The
        # native style only formats lines (docs/design.md, the budget).
        config.option.tbstyle = "native"
    prepare.set_variation(config.getoption("seed_shift"), config.getoption("rank_threads"))
    prepare.configure_ranks()
    if os.environ.get("MLSYS_LEAKCHECK"):  # selfcheck: expected values sent to ranks
        from grader import leakcheck

        leakcheck.install()
    roots = [REPO_ROOT / "grader" / "suites"]
    roots += [Path(p).resolve() for p in config.getoption("hidden_root")]
    prepare.provide_suites_package(roots[1:])
    sandbox_status = prepare.enable_sandbox(mode, specs[0], roots)
    config.stash[STATE] = SessionState(impls=impls, results_path=config.getoption("mlsys_results"),
                                 progress=config.getoption("mlsys_progress"), hidden_roots=roots,
                                 stop_first=stop_first, sandbox=sandbox_status)
    target = config.getoption("mlsys_events")
    if target and not hasattr(config, "workerinput"):  # the controller writes the events
        config.stash[STATE].events = events.open_channel(target)


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


@pytest.hookimpl(tryfirst=True)  # before any plugin reorders: `order` is the suite's order
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE]
    missing = []
    for index, item in enumerate(items):
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
                                     ("base_nodeid", nodeid), ("exercises", exercised),
                                     ("order", index + 1)])
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
