"""Coverage-guided grading of variants (grader/instructor/plugin_coverage.py, harness/calltrace.py).

The promise: a variant's test is taken from the reference's run only when it cannot tell them
apart — it ran none of the functions the variant changes, in its own launches, in the fixtures
it uses, or in a `Memo` launch it reuses — and a variant gets the same verdict as when every
test runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.instructor.mutate.batch import BatchEngine
from grader.instructor.mutate.runner import Verdict
from grader.instructor.variant_changes import lines_changes, mutant_changes, stub_changes
from grader.report.results import RunResult
from grader.session.plugin import REPO_ROOT
from harness import calltrace
from harness.impl import resolve_impl

SUITE = '''
import pytest
from harness.cases import Memo


def rank_add(ctx):
    return ctx.impl_module("toy", "toy").add(ctx.rank, 1)


def rank_scale(ctx):
    return ctx.impl_module("toy", "toy").Scaler(3).apply(ctx.rank)


def rank_both(ctx):
    toy = ctx.impl_module("toy", "toy")
    return toy.add(toy.Scaler(2).apply(ctx.rank), 1)


@pytest.fixture(scope="module")
def shared_scale(launch):
    return launch(rank_scale, world_size=2, timeout=20).values



@pytest.fixture(scope="module")
def memo(launch):
    return Memo()


@pytest.mark.points(1)
@pytest.mark.exercises("add")
def test_add(launch):
    assert launch(rank_add, world_size=2, timeout=20).values == [1, 2]


@pytest.mark.points(1)
@pytest.mark.exercises("Scaler")
def test_scale_fixture_first(shared_scale):
    assert shared_scale == [0, 3]


@pytest.mark.points(1)
@pytest.mark.exercises("Scaler")
def test_scale_fixture_again(shared_scale):
    assert shared_scale[1] == 3


@pytest.mark.points(1)
@pytest.mark.exercises("add", "Scaler")
def test_both_through_a_memo(launch, memo):
    values = memo.get("both", lambda: launch(rank_both, world_size=2, timeout=20).values)
    assert values == [1, 3]


@pytest.mark.points(1)
@pytest.mark.exercises("add", "Scaler")
def test_memo_reused(launch, memo):
    values = memo.get("both", lambda: launch(rank_both, world_size=2, timeout=20).values)
    assert values[1] == 3
'''

GOOD = '''
def add(a, b):
    return a + b


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, x):
        return self.factor * x
'''

WRONG_ADD = GOOD.replace("return a + b", "return a - b")
WRONG_SCALE = GOOD.replace("return self.factor * x", "return self.factor + x")


def write(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    suite = tmp_path / "hidden" / "toy"
    suite.mkdir(parents=True)
    (suite / "test_toy.py").write_text(textwrap.dedent(SUITE))
    folders = {}
    for name, source in {"good": GOOD, "wrong_add": WRONG_ADD,
                         "wrong_scale": WRONG_SCALE}.items():
        module = tmp_path / name / "toy" / "toy.py"
        module.parent.mkdir(parents=True)
        module.write_text(source)
        folders[name] = module.parent.parent
    return suite, folders


def session(tmp_path: Path, suite: Path, impls: list[Path], plan: dict | None,
            *extra: str) -> dict[str, RunResult]:
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "pytest", "-p", "grader.session.plugin", "--noconftest", "-q",
               "--hidden-root", str(suite.parent), "--mlsys-results", str(out),
               "-p", "no:cacheprovider", *extra, str(suite)]
    for impl in impls:
        command += ["--impl", str(impl)]
    if plan is not None:
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        command += ["--coverage-plan", str(tmp_path / "plan.json")]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert out.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return {Path(run.impl).name: run for run in RunResult.load_all(out)}


def by_name(run: RunResult) -> dict[str, tuple[str, bool]]:
    return {t.name: (t.outcome, t.inferred) for t in run.tests}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("coverage")
    suite, folders = write(tmp_path)
    plan = {"trace": str(folders["good"]),
            "variants": {str(folders["wrong_add"]): {"changed": ["toy:add"], "always": []},
                         str(folders["wrong_scale"]): {"changed": ["toy:Scaler"],
                                                       "always": []}}}
    order = [folders["good"], folders["wrong_add"], folders["wrong_scale"]]
    planned = session(tmp_path, suite, order, plan)
    full = session(tmp_path, suite, order, None)
    return tmp_path, suite, folders, planned, full


def test_a_test_that_ran_none_of_the_change_takes_the_reference_outcome(course):
    *_, planned, full = course
    assert by_name(planned["wrong_add"]) == {
        "test_add": ("failed", False),
        "test_scale_fixture_first": ("passed", True),  # its fixture's launch: Scaler only
        "test_scale_fixture_again": ("passed", True),  # the cached fixture: the same
        "test_both_through_a_memo": ("failed", False),
        "test_memo_reused": ("failed", False),  # a Memo hit: what its launch ran counts
    }
    assert by_name(planned["wrong_scale"]) == {
        "test_add": ("passed", True),
        "test_scale_fixture_first": ("failed", False),
        "test_scale_fixture_again": ("failed", False),
        "test_both_through_a_memo": ("failed", False),
        "test_memo_reused": ("failed", False),
    }
    for name in ("wrong_add", "wrong_scale"):  # the same scores as when every test runs
        assert planned[name].score == full[name].score
        assert {t.name for t in planned[name].tests if not t.passed} == \
            {t.name for t in full[name].tests if not t.passed}
    assert not any(t.inferred for t in planned["good"].tests)


def test_always_runs_the_tests_that_declare_a_name(course):
    tmp_path, suite, folders, *_ = course
    plan = {"trace": str(folders["good"]),
            "variants": {str(folders["wrong_add"]): {"changed": ["toy:add"],
                                                     "always": ["Scaler"]}}}
    runs = session(tmp_path, suite, [folders["good"], folders["wrong_add"]], plan)
    assert not any(t.inferred for t in runs["wrong_add"].tests)


def test_nothing_is_inferred_without_the_reference_first(course):
    tmp_path, suite, folders, *_ = course
    plan = {"trace": str(folders["good"]),
            "variants": {str(folders["wrong_add"]): {"changed": ["toy:add"], "always": []}}}
    runs = session(tmp_path, suite, [folders["wrong_add"], folders["good"]], plan)
    assert not any(t.inferred for t in runs["wrong_add"].tests)


def test_under_xdist_no_verdict_changes(course):
    tmp_path, suite, folders, _, full = course
    plan = {"trace": str(folders["good"]),
            "variants": {str(folders["wrong_add"]): {"changed": ["toy:add"], "always": []}}}
    runs = session(tmp_path, suite, [folders["good"], folders["wrong_add"]], plan, "-n", "2")
    assert runs["wrong_add"].score == full["wrong_add"].score


def test_a_mutant_starts_with_the_test_that_caught_it_last_time(course):
    """`first` (grader/instructor/caught_first.py): the named test runs before the mutant's
    others, so a mutant that stops at its first failure runs that one test; a name that no
    longer catches it (stale) is followed by the rest in suite order: the same verdict."""
    tmp_path, suite, folders, _, full = course
    nodeid = {t.name: t.nodeid for t in full["wrong_scale"].tests}
    order = [folders["good"], folders["wrong_scale"]]
    stop = ("--stop-first", str(folders["wrong_scale"]))

    def first(name: str) -> RunResult:
        plan = {"trace": str(folders["good"]), "variants": {},
                "first": {str(folders["wrong_scale"]): nodeid[name]}}
        return session(tmp_path, suite, order, plan, *stop)["wrong_scale"]

    current = first("test_memo_reused")  # the last test of the suite, and it fails
    assert [t.name for t in current.tests if t.outcome == "failed"] == ["test_memo_reused"]
    assert len(current.not_run) == 4
    stale = first("test_add")  # passes for this mutant: suite order goes on after it
    assert [(t.name, t.outcome) for t in stale.tests if t.outcome != "skipped"] == [
        ("test_add", "passed"), ("test_scale_fixture_first", "failed")]
    assert len(stale.not_run) == 3


def test_a_plan_naming_an_unknown_impl_is_a_usage_error(course):
    tmp_path, suite, folders, *_ = course
    (tmp_path / "bad.json").write_text(json.dumps({"trace": "solutions", "variants": {}}))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.session.plugin", "--noconftest", "-q",
         "--hidden-root", str(suite.parent), "-p", "no:cacheprovider", str(suite),
         "--impl", str(folders["good"]), "--coverage-plan", str(tmp_path / "bad.json")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4 and "is not one of the --impl values" in done.stderr


def test_coverage_matches_names_classes_and_nested_functions():
    ran = calltrace.Coverage({"toy:Scaler.apply", "toy:add.<locals>.inner", "other:add"},
                             launches=1)
    assert ran.touches(["toy:Scaler"]) and ran.touches(["toy:add"])
    assert ran.touches(["add"])  # a bare name matches in any module
    assert not ran.touches(["toy:Scale"]) and not ran.touches(["toy:sub"])
    assert calltrace.Coverage(complete=False, launches=1).touches(["anything"])
    assert calltrace.Coverage().touches(["anything"])  # no launch: it ran outside the ranks


def test_mutant_changes_name_the_functions_a_patch_falls_in(tmp_path):
    solution = tmp_path / "solutions" / "toy"
    (solution / "mutants").mkdir(parents=True)
    (solution / "toy.py").write_text("LIMIT = 3\n" + GOOD)

    def mutant(body: str) -> tuple[str, ...] | None:
        path = solution / "mutants" / "m.py"
        path.write_text('"""doc"""\nfrom harness.mutation import mutate\n\nMUTATES = "toy"\n'
                        'FEEDBACK = "x"\n' + body)
        return mutant_changes(path, solution)

    assert mutant('mutate(globals(), "toy", "toy", replace=[("a + b", "a - b")])\n') \
        == ("toy:add",)
    assert mutant('mutate(globals(), "toy", "toy", replace=[("self.factor * x", "x")])\n') \
        == ("toy:Scaler.apply",)
    assert mutant('mutate(globals(), "toy", "toy", replace=[("LIMIT = 3", "LIMIT = 4")])\n') \
        is None  # module level: may change anything
    assert mutant('mutate(globals(), "toy", "toy")\n\ndef add(a, b):\n    return 0\n') is None
    assert stub_changes("toy", "Scaler") == ("toy:Scaler",)
    source = (solution / "toy.py").read_text()
    assert lines_changes(source, "toy", 4, 4) == ("toy:add",)  # `    return a + b`
    assert lines_changes(source, "toy", 1, 1) is None  # `LIMIT = 3`


def test_the_mutation_engine_runs_a_mutant_only_on_the_tests_that_reach_it(course):
    """`grader mutate`: the solution traced once (`trace_baseline`), then batches of mutants
    against that record; a mutant of `Scaler` never runs `test_add`."""
    tmp_path, suite, folders, *_ = course
    engine = BatchEngine([suite], REPO_ROOT, suite.parent, jobs=1, batch_size=4)
    baseline = engine.trace_baseline(folders["good"], tmp_path / "record.json", 300.0)
    assert baseline.status == "survived" and engine.reference is not None
    recorded = json.loads((tmp_path / "record.json").read_text())
    assert all(entry["passed"] and entry["complete"] for entry in recorded.values())
    engine.changes[resolve_impl(str(folders["wrong_scale"])).argument] = ("toy:Scaler.apply",)
    verdicts: dict[str, Verdict] = {}
    engine.run([("wrong_add", folders["wrong_add"]), ("wrong_scale", folders["wrong_scale"])],
               300.0, lambda key, v: verdicts.__setitem__(key, v))
    assert verdicts["wrong_add"].status == verdicts["wrong_scale"].status == "killed"
    assert verdicts["wrong_add"].killed_by.endswith("test_add")  # no plan for it: runs all
    assert verdicts["wrong_scale"].killed_by.endswith("test_scale_fixture_first")
    assert not any(t.endswith("test_add") for t in verdicts["wrong_scale"].tests_run)
