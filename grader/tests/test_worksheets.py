"""Worksheets: the committed notebooks, nbgrader's traps, and worksheet rows in the reports.

One nbgrader run (module fixture) autogrades a two-question toy worksheet for several
"students", each built to trip one trap: a warning during a test, stderr output, a deleted test
cell, a test cell edited to `pass`, an answer that never ends, a missing and a broken
notebook — all behind a decoy `python3` kernelspec that would fail every cell if used.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
from filelock import FileLock

from grader.instructor import worksheets as checks
from grader.manifest import REPO_ROOT, ManifestError, load_manifest, parse_manifest
from grader.report.gradescope import gradescope_json
from grader.report.render import junit_xml, summary_markdown, terminal_report
from grader.report.results import ResultsError, RunResult
from grader.worksheets import grading, nbgrade
from harness.impl import ImplSpec

SCHEMA = json.loads((REPO_ROOT / "grader" / "schemas" / "results.schema.json").read_text())
COURSE = load_manifest()
CELL_TIMEOUT = 5


# --- the committed worksheets (no nbgrader run) -----------------------------------------------


@pytest.mark.parametrize("assignment", COURSE.assignments, ids=lambda a: a.id)
def test_committed_worksheet_is_well_formed_and_leaks_nothing(assignment):
    source = grading.source_path(REPO_ROOT, assignment.id)
    release = grading.release_path(REPO_ROOT, assignment.id)
    assert assignment.worksheet_points > 0 and source.is_file() and release.is_file()
    assert checks.static_breaches(assignment, source, release, REPO_ROOT) == []
    cells = grading.grade_cells(source)
    assert sum(c.points for c in cells) == assignment.worksheet_points
    assert {c.grade_id for c in cells} == set(c.grade_id for c in grading.grade_cells(release))


def test_the_toy_run_generates_the_student_version(toy):
    """The committed worksheets' student versions are checked where they are graded: `grader
    doctor` (in `make test`, `stale_release`) and selfcheck's worksheet check, which generates
    each one with nbgrader and compares it with the committed file; this run generates only the
    toy's."""
    done = toy[1]
    assert sorted(done.releases) == ["toy"]
    assert nbgrade.read_notebook(done.releases["toy"])["cells"]


def test_leak_check_finds_solution_and_hidden_lines(tmp_path):
    source = grading.source_path(REPO_ROOT, "ring_allreduce")
    release = json.loads(grading.release_path(REPO_ROOT, "ring_allreduce").read_text())
    assert checks.leaks(source, grading.release_path(REPO_ROOT, "ring_allreduce")) == []
    planted = copy.deepcopy(release)
    planted["cells"][3]["source"] = ["    return steps * chunk\n"]
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps(planted))
    assert any("steps * chunk" in leak for leak in checks.leaks(source, path))
    planted["cells"][3]["source"] = ["### BEGIN HIDDEN TESTS\n", "x = 1\n"]
    path.write_text(json.dumps(planted))
    assert any("BEGIN HIDDEN TESTS" in leak for leak in checks.leaks(source, path))


def test_grade_cells_need_whole_positive_points(tmp_path):
    nb = toy_source()
    nb["cells"][2]["metadata"]["nbgrader"]["points"] = 1.5
    path = tmp_path / "bad.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(nbgrade.WorksheetError, match="whole number"):
        grading.grade_cells(path)
    path.write_text("{not json")
    with pytest.raises(nbgrade.WorksheetError, match="not a readable notebook"):
        grading.grade_cells(path)


def test_manifest_worksheet_points():
    data = {"course": {"name": "c", "version": "1"}, "assignment": [
        {"id": "a", "title": "A", "part": "I", "points": 10, "public_points": 2,
         "prerequisites": [], "topics": [], "modules": ["m"]}]}
    assert parse_manifest(data).assignments[0].worksheet_points == 0
    data["assignment"][0]["worksheet_points"] = -1
    with pytest.raises(ManifestError, match="worksheet_points"):
        parse_manifest(data)


def test_kernel_runs_this_interpreter_quietly(tmp_path):
    jupyter = nbgrade.write_kernelspec(tmp_path / "jupyter")
    spec = json.loads((jupyter / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    assert spec["env"]["PYTHONWARNINGS"] == "ignore"
    env = nbgrade.worker_env(jupyter)
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)  # alembic
    assert env["JUPYTER_PATH"].split(":")[0] == str(jupyter)


def test_which_notebook_each_impl_grades(tmp_path):
    def spec(kind: str, root: Path) -> ImplSpec:
        return ImplSpec(kind=kind, root=str(root), text=kind)

    assert grading.submitted_notebook(spec("assignments", REPO_ROOT / "assignments"),
                                      REPO_ROOT, "ppo") == \
        REPO_ROOT / "assignments" / "ppo" / "worksheet.ipynb"
    assert grading.submitted_notebook(spec("solutions", REPO_ROOT / "solutions"),
                                      REPO_ROOT, "ppo") == \
        REPO_ROOT / "solutions" / "ppo" / "worksheet.ipynb"
    mutant = spec("mutant", REPO_ROOT / "solutions")
    assert grading.submitted_notebook(mutant, REPO_ROOT, "ppo").parent.name == "ppo"
    assert grading.submitted_notebook(spec("dir", tmp_path), REPO_ROOT, "ppo") == \
        tmp_path / "ppo" / "worksheet.ipynb"


# --- a toy worksheet, and students that trip nbgrader's traps ---------------------------------


def _cell(kind, source, grade_id, **meta):
    cell = {"cell_type": kind, "id": grade_id.replace("_", "-"), "metadata": {"nbgrader": {
        "grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
        "solution": False, **meta}}, "source": source}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def toy_source() -> dict:
    """Two questions: `double` (a visible and a hidden test) and `square` (a visible test)."""
    cells = [
        _cell("markdown", "# Toy worksheet", "intro", locked=True),
        _cell("code", "def double(v):\n    ### BEGIN SOLUTION\n    return 2 * v\n"
              "    ### END SOLUTION\n\n\nanswer = double(21)", "q1_answer", solution=True),
        _cell("code", "assert answer == 42, f'expected 42, got {answer}'", "q1",
              grade=True, locked=True, points=1),
        _cell("code", "# hidden\n### BEGIN HIDDEN TESTS\nassert double(5) == 10, "
              "'SECRET-INPUT-5'\n### END HIDDEN TESTS", "q1_hidden",
              grade=True, locked=True, points=1),
        _cell("code", "def square(v):\n    ### BEGIN SOLUTION\n    return v * v\n"
              "    ### END SOLUTION", "q2_answer", solution=True),
        _cell("code", "assert square(3) == 9, 'square(3) should be 9'", "q2",
              grade=True, locked=True, points=1),
    ]
    return {"cells": cells, "metadata": {"kernelspec": {
        "display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}


def _answers(nb: dict, q1: str | None = None, q2: str | None = None) -> dict:
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        if grade_id == "q1_answer" and q1 is not None:
            cell["source"] = q1
        if grade_id == "q2_answer" and q2 is not None:
            cell["source"] = q2
    return nb


def _without(nb: dict, grade_id: str) -> dict:
    nb = copy.deepcopy(nb)
    nb["cells"] = [c for c in nb["cells"] if c["metadata"]["nbgrader"]["grade_id"] != grade_id]
    return nb


def _edited(nb: dict, grade_id: str, source: str) -> dict:
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell["metadata"]["nbgrader"]["grade_id"] == grade_id:
            cell["source"] = source
    return nb


STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
WARNS = ("import warnings\n\ndef double(v):\n    warnings.warn(f'doubling {v}')\n"
         "    return 2 * v\n\nanswer = double(21)")
STDERR = ("import sys\n\ndef double(v):\n    if v != 21:\n        print('note', file=sys.stderr)\n"
          "    return 2 * v\n\nanswer = double(21)")
TYPED = "def double(v):\n    return 42\n\nanswer = 42"
FOREVER = "while True:\n    pass"

STUB_Q1 = ("def double(v):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n\n"
           "answer = double(21)")
STUDENTS = {
    "source": lambda nb: nb,
    "release": lambda nb: _answers(nb, q1=STUB_Q1, q2=STUB),
    "warns": lambda nb: _answers(nb, q1=WARNS),
    "stderr_edited": lambda nb: _edited(_answers(nb, q1=STDERR, q2="def square(v):\n    return v"),
                                        "q2", "pass"),
    "deleted_typed_forever": lambda nb: _without(_answers(nb, q1=TYPED, q2=FOREVER), "q1"),
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory, worker_id):
    """(cells, Autograded) of one nbgrader run over every toy student, behind a decoy spec.

    Under xdist the run is shared by the workers through a file in the session's shared temp
    directory (a lock makes the second worker wait for the first one's run).
    """
    if worker_id == "master":
        return _run_toy(tmp_path_factory.mktemp("toy"))
    shared = tmp_path_factory.getbasetemp().parent / "worksheets-toy"
    with FileLock(f"{shared}.lock"):
        saved = shared / "autograded.json"
        if saved.is_file():
            data = json.loads(saved.read_text())
            done = nbgrade.Autograded(
                tuple(nbgrade.CellGrade(**g) for g in data["grades"]),
                {a: Path(p) for a, p in data["releases"].items()},
                {(a, s): why for a, s, why in data["problems"]})
            return grading.grade_cells(shared / "source.ipynb"), done
        shared.mkdir(exist_ok=True)
        cells, done = _run_toy(shared)
        saved.write_text(json.dumps({
            "grades": [dataclasses.asdict(g) for g in done.grades],
            "releases": {a: str(p) for a, p in done.releases.items()},
            "problems": [[a, s, why] for (a, s), why in done.problems.items()]}))
        return cells, done


def _run_toy(folder: Path):
    source = folder / "source.ipynb"
    source.write_text(json.dumps(toy_source()))
    decoy = folder / "decoy" / "kernels" / "python3"
    decoy.mkdir(parents=True)
    (decoy / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c", "raise SystemExit(3)"], "display_name": "decoy",
        "language": "python"}))
    submissions = []
    for student, make in STUDENTS.items():
        path = folder / f"{student}.ipynb"
        path.write_text(json.dumps(make(toy_source())))
        submissions.append(nbgrade.Submission("toy", student, path))
    (folder / "broken.ipynb").write_text("{ not a notebook")
    submissions.append(nbgrade.Submission("toy", "broken", folder / "broken.ipynb"))
    submissions.append(nbgrade.Submission("toy", "missing", None))
    sources = {"toy": source}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(folder / "decoy"))
        done = nbgrade.autograde(submissions, sources, cell_timeout=CELL_TIMEOUT, timeout=300,
                            release_dir=folder / "releases")
    return grading.grade_cells(source), done


def verdicts(toy, student: str) -> dict[str, object]:
    cells, done = toy
    return {t.name.split("::")[1]: t for t in grading.to_test_results("toy", student, cells, done)}


def test_toy_source_scores_full_marks(toy):
    results = verdicts(toy, "source")
    assert all(t.passed for t in results.values()), results
    assert {n: (t.visibility, t.part) for n, t in results.items()} == {
        "q1": ("public", "worksheet"), "q1_hidden": ("hidden", "worksheet"),
        "q2": ("public", "worksheet")}


def test_stub_answers_are_not_implemented(toy):
    results = verdicts(toy, "release")
    assert not any(t.passed for t in results.values())
    assert all(t.not_implemented for t in results.values()), results
    assert all(t.feedback.startswith("not implemented") for t in results.values())


def test_a_warning_during_a_test_does_not_zero_it(toy):
    assert all(t.passed for t in verdicts(toy, "warns").values())


def test_stderr_zeroes_a_cell_and_edited_tests_are_restored(toy):
    results = verdicts(toy, "stderr_edited")
    assert results["q1"].passed
    assert not results["q1_hidden"].passed and "stderr" in results["q1_hidden"].reason
    assert not results["q2"].passed, "the test edited to `pass` must run as written"
    assert "square(3) should be 9" in results["q2"].reason


def test_deleted_tests_are_restored_hidden_text_stays_hidden_and_hangs_time_out(toy):
    results = verdicts(toy, "deleted_typed_forever")
    assert results["q1"].passed, "the deleted visible test is restored and run"
    hidden = results["q1_hidden"]
    assert not hidden.passed and "SECRET" not in hidden.feedback
    assert hidden.feedback == "a hidden test failed (AssertionError)"
    assert not results["q2"].passed and "CellTimeoutError" in results["q2"].reason


def test_missing_and_broken_notebooks_fail_every_cell_with_the_reason(toy):
    for student, reason in (("missing", "no worksheet.ipynb"), ("broken", "not a readable")):
        results = verdicts(toy, student)
        assert not any(t.passed for t in results.values())
        assert all(reason in t.reason for t in results.values()), results


# --- worksheet rows in the reports ------------------------------------------------------------


def test_reports_show_the_worksheet_part_without_hidden_text(toy):
    cells, done = toy
    suite = RunResult.from_json({"impl": "x", "collection_errors": [], "exitstatus": 0,
                                 "tests": [{
                                     "nodeid": "assignments/toy/test_public.py::test_a",
                                     "name": "test_a", "assignment": "toy",
                                     "visibility": "public", "points": 5, "outcome": "passed",
                                     "reason": "", "not_implemented": False,
                                     "not_graded_here": False, "duration": 0.1}]})
    run = RunResult(suite.impl, suite.tests + grading.to_test_results(
        "toy", "deleted_typed_forever", cells, done))
    document = gradescope_json(run, ("toy",), {"name": "mlsys-labs", "version": "9"})
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert document["extra_data"]["course"] == {"name": "mlsys-labs", "version": "9"}
    assert document["extra_data"]["assignments"]["toy"]["parts"] == {
        "suite": {"score": 5, "max_score": 5}, "worksheet": {"score": 1, "max_score": 3}}
    assert [t["extra_data"]["part"] for t in document["tests"]] == ["suite"] + ["worksheet"] * 3
    summary = summary_markdown(run, {"toy": "Toy"})
    assert "suites 5 / 5 · worksheet 1 / 3" in summary and "| worksheet hidden |" in summary
    for text in (json.dumps(document), summary, junit_xml(run), terminal_report(run)):
        assert "SECRET" not in text
    assert 'classname="toy.worksheet.hidden"' in junit_xml(run)


def test_results_part_is_checked():
    item = {"nodeid": "n", "name": "n", "assignment": "a", "visibility": "public",
            "points": 1, "outcome": "passed", "reason": "", "not_implemented": False,
            "not_graded_here": False, "duration": 0.0}
    base = {"impl": "x", "collection_errors": [], "exitstatus": 0}
    assert RunResult.from_json({**base, "tests": [item]}).tests[0].part == "suite"
    assert RunResult.from_json({**base, "tests": [{**item, "part": "worksheet"}]}) \
        .tests[0].part == "worksheet"
    with pytest.raises(ResultsError, match="part"):
        RunResult.from_json({**base, "tests": [{**item, "part": "quiz"}]})


def test_worksheet_without_its_source_is_not_graded_here():
    results = grading.not_graded("ppo", 10, "no source")
    assert [(t.points, t.max_score, t.not_graded_here) for t in results] == [(10, 0, True)]
    assert results[0].feedback.startswith("not graded on this machine")


def test_an_autograde_that_raises_names_the_cause_nbgrader_logged(tmp_path):
    """nbgrader's exception says only "see the above traceback"; the problem reported (after
    one more try: grader/worksheets/nbworker.py) is the last error it logged since the try
    began, not an earlier notebook's."""
    from grader.worksheets.nbworker import _logged_cause

    log = tmp_path / "nbgrader.log"
    earlier = "[AutogradeApp | ERROR] an earlier notebook's error\n"
    log.write_text(earlier + textwrap.dedent("""\
        [AutogradeApp | ERROR] There was an error processing assignment: zero2
        Traceback (most recent call last):
          File "nbclient/client.py", line 600, in async_start_new_kernel_client
            await self._async_wait_for_ready()
        RuntimeError: Kernel didn't respond in 60 seconds
        [AutogradeApp | ERROR] Please see the error log for details
        """))
    assert _logged_cause(log, len(earlier)) == "RuntimeError: Kernel didn't respond in 60 seconds"
    log.write_text(earlier)
    assert _logged_cause(log, 0) == earlier.strip()
    assert _logged_cause(log, len(earlier)) == ""
    assert _logged_cause(tmp_path / "none.log", 0) == ""
