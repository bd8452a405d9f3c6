"""`python -m grader gradebook`: results.json into nbgrader's gradebook, and the grade table out."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.instructor import gradebook as gbm
from grader.manifest import REPO_ROOT, load_manifest
from grader.report.gradescope import gradescope_json
from grader.report.results import RunResult
from grader.report.results import TestResult as Result  # (a Test* name would be collected)

COURSE = load_manifest()
VERSION = {"name": COURSE.name, "version": COURSE.version}


def result(assignment, name, points, passed=True, visibility="public", part="suite"):
    return Result(nodeid=f"{assignment}::{name}", name=name, assignment=assignment,
                      visibility=visibility, points=points,
                      outcome="passed" if passed else "failed", part=part)


def write_run(path: Path, tests, course=VERSION) -> Path:
    path.write_text(json.dumps(gradescope_json(RunResult("solutions", tuple(tests)),
                                               COURSE.ids, course)))
    return path


FIRST = [
    result("ring_allreduce", "test_a", 15),
    result("ring_allreduce", "test_b", 5, passed=False),
    result("ring_allreduce", "test_h", 70, visibility="hidden"),
    result("ring_allreduce", "worksheet::q1", 1, part="worksheet"),
    result("ring_allreduce", "worksheet::q1_hidden", 1, visibility="hidden", part="worksheet"),
    result("ppo", "test_p", 20),
]


@pytest.fixture(scope="module")
def empty_db(tmp_path_factory) -> Path:
    """An empty gradebook, made once: creating one runs `alembic` (seconds)."""
    db = tmp_path_factory.mktemp("template") / "gradebook.db"
    with gbm.open_gradebook(db, COURSE):
        pass
    return db


@pytest.fixture
def db(empty_db, tmp_path) -> Path:
    return Path(shutil.copy(empty_db, tmp_path / "gradebook.db"))


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def export_csv(db: Path) -> list[dict[str, str]]:
    headers, table = gbm.grade_table(db, COURSE)
    buffer = io.StringIO()
    csv.writer(buffer).writerows([headers, *table])
    return list(csv.DictReader(io.StringIO(buffer.getvalue())))


def test_import_builds_the_course_from_the_manifest_and_records_each_part(tmp_path, db):
    scores = gbm.import_results(write_run(tmp_path / "r.json", FIRST), "alice", db, COURSE)
    assert {(s.assignment, s.notebook, s.cell): s.score for s in scores} == {
        ("ppo", "suites", "public"): 20, ("ring_allreduce", "suites", "public"): 15,
        ("ring_allreduce", "suites", "hidden"): 70,
        ("ring_allreduce", "worksheet", "worksheet"): 2}
    assert sorted(r[0] for r in rows(db, "select name from assignment")) == sorted(COURSE.ids)
    with gbm.open_gradebook(db, COURSE) as gb:
        cells = {(a.name, c.name): c.max_score
                 for a in gb.assignments for nb in a.notebooks for c in nb.grade_cells}
    ring = COURSE.get("ring_allreduce")
    assert cells[("ring_allreduce", "public")] == ring.public_points
    assert cells[("ring_allreduce", "hidden")] == ring.points - ring.public_points
    assert cells[("ring_allreduce", "worksheet")] == ring.worksheet_points
    table = export_csv(db)
    assert [(r["student"], r["ring_allreduce"], r["ppo"], r["zero2"], r["total"]) for r in table] \
        == [("alice", "87", "20", "", "107")]
    assert table[0]["max_score"] == str(sum(a.points + a.worksheet_points
                                            for a in COURSE.assignments))


def test_reimport_is_idempotent_and_keeps_parts_a_run_did_not_grade(tmp_path, db):
    first = write_run(tmp_path / "first.json", FIRST)
    gbm.import_results(first, "alice", db, COURSE)
    tables = ("student", "submitted_assignment", "submitted_notebook", "grade", "grade_cells")
    counts = {t: rows(db, f"select count(*) from {t}") for t in tables}
    gbm.import_results(first, "alice", db, COURSE)
    assert {t: rows(db, f"select count(*) from {t}") for t in tables} == counts
    # a later run of ring_allreduce without hidden suites or worksheet: those grades stay
    later = write_run(tmp_path / "later.json", [result("ring_allreduce", "test_a", 20)])
    gbm.import_results(later, "alice", db, COURSE)
    assert export_csv(db)[0]["ring_allreduce"] == str(20 + 70 + 2)
    gbm.import_results(first, "bob", db, COURSE)
    assert [r["student"] for r in export_csv(db)] == ["alice", "bob"]


@pytest.mark.parametrize("course, message", [
    ({"name": COURSE.name, "version": "1999.01"}, "was graded for course"),
    ({"name": "other-course", "version": COURSE.version}, "was graded for course"),
])
def test_results_of_another_course_version_are_refused(tmp_path, course, message):
    path = write_run(tmp_path / "r.json", FIRST, course)
    with pytest.raises(gbm.GradebookError, match=message):
        gbm.import_results(path, "alice", tmp_path / "gb.db", COURSE)
    assert not (tmp_path / "gb.db").exists(), "nothing is written for a refused file"


def test_old_or_malformed_results_are_refused(tmp_path):
    path = write_run(tmp_path / "r.json", FIRST)
    document = json.loads(path.read_text())
    del document["extra_data"]["course"]
    path.write_text(json.dumps(document))
    with pytest.raises(gbm.GradebookError, match="course"):
        gbm.read_results(path, COURSE)
    path.write_text("[1, 2")
    with pytest.raises(gbm.GradebookError, match="not a readable results file"):
        gbm.read_results(path, COURSE)
    unknown = write_run(tmp_path / "u.json", [result("no_such_assignment", "t", 1)])
    with pytest.raises(gbm.GradebookError, match="names no assignment"):
        gbm.read_results(unknown, COURSE)


def test_cli_works_without_the_venv_on_path(tmp_path):
    """nbgrader runs `alembic` to create a gradebook; the CLI must find the venv's copy even
    when PATH lacks the venv (as under `make test`)."""
    path = write_run(tmp_path / "r.json", FIRST)
    db = tmp_path / "fresh" / "gradebook.db"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    command = [sys.executable, "-m", "grader", "gradebook"]
    done = subprocess.run(command + ["import", str(path), "--student", "carol", "--db", str(db)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "recorded 4 grade(s) for carol" in done.stdout and done.stderr == ""
    out = tmp_path / "grades.csv"
    assert main(["gradebook", "export", "--format", "csv", "--db", str(db), "--out", str(out)]) \
        == 0
    assert out.read_text().splitlines()[1].startswith("carol,87,")


def test_cli_refuses_another_version_and_exports_a_table(tmp_path, db, capsys):
    gbm.import_results(write_run(tmp_path / "r.json", FIRST), "dave", db, COURSE)
    refused = write_run(tmp_path / "old.json", FIRST, {"name": COURSE.name, "version": "0"})
    assert main(["gradebook", "import", str(refused), "--student", "dave", "--db", str(db)]) == 1
    assert "was graded for course" in capsys.readouterr().err
    assert main(["gradebook", "export", "--format", "table", "--db", str(db)]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:3] == ["dave", "87", "20"]
    assert main(["gradebook", "export", "--db", str(tmp_path / "none.db")]) == 1
