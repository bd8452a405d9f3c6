"""`grader doctor`: the course is complete, and each missing or stale artefact is named.

Every test that changes files works on a copy of one assignment in a temporary course root
(`copy_assignment`), never on the real tree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.instructor.authoring.artefacts import ARTEFACTS, KINDS, artefact
from grader.instructor.authoring.checks import ERROR, WARN
from grader.instructor.authoring.doctor import diagnose, errors_of, run_doctor
from grader.instructor.authoring.notebooks import stale_release
from grader.instructor.mutate.summary import provided_hash, suite_hash, suite_staleness
from grader.manifest import REPO_ROOT, load_manifest

COURSE = load_manifest(REPO_ROOT / "assignments" / "course.toml")
# A small real assignment to copy and break (any would do).
SAMPLE = "ring_allreduce"


def copy_assignment(assignment_id: str, root: Path) -> Path:
    """The manifest, README.md and every file of one assignment, copied under `root`."""
    assignment = COURSE.get(assignment_id)
    for name in ("assignments/course.toml", "README.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, root / name)
    folders = (f"assignments/{assignment_id}", f"solutions/{assignment_id}",
               f"grader/suites/{assignment_id}", f"grader/tests/independent/{assignment_id}")
    for folder in folders:
        shutil.copytree(REPO_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for item in ARTEFACTS:
        for path in item.paths(assignment):
            if not (root / path).exists() and (REPO_ROOT / path).is_file():
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO_ROOT / path, root / path)
    return root


def test_every_assignment_of_the_course_passes_the_doctor():
    lines: list[str] = []
    status = run_doctor(COURSE, [], REPO_ROOT, quiet=True, echo=lines.append)
    assert status == 0, "\n".join(lines)


def test_a_copied_assignment_passes_in_its_temporary_root(tmp_path):
    root = copy_assignment(SAMPLE, tmp_path)
    report = diagnose(COURSE.get(SAMPLE), COURSE, root)
    assert not errors_of(report)


@pytest.mark.parametrize("kind", [k for k in KINDS if artefact(k).paths(COURSE.get(SAMPLE))])
def test_deleting_any_artefact_fails_the_doctor_naming_it(kind, tmp_path):
    root = copy_assignment(SAMPLE, tmp_path)
    assignment = COURSE.get(SAMPLE)
    path = artefact(kind).paths(assignment)[-1]
    (root / path).unlink()
    lines: list[str] = []
    assert run_doctor(COURSE, [SAMPLE], root, echo=lines.append) == 1
    named = [line for line in lines if line.startswith("doctor:") and path in line]
    assert named, f"deleting {path} was not named:\n" + "\n".join(lines)


def test_too_few_mutants_and_a_mutant_without_feedback_are_named(tmp_path):
    root = copy_assignment(SAMPLE, tmp_path)
    mutants = sorted((root / "solutions" / SAMPLE / "mutants").glob("[!_]*.py"))
    for path in mutants[7:]:
        path.unlink()
    mutants[0].write_text('"""No feedback."""\nMUTATES = "ring"\n')
    errors = errors_of(diagnose(COURSE.get(SAMPLE), COURSE, root))
    assert any("holds 7 mutant(s); at least 8" in e for e in errors), errors
    assert any(mutants[0].name in e and "FEEDBACK" in e for e in errors), errors


def test_an_api_drift_between_stub_and_solution_is_named(tmp_path):
    root = copy_assignment(SAMPLE, tmp_path)
    stub = root / "assignments" / SAMPLE / "ring.py"
    stub.write_text(stub.read_text().replace("def ring_shift(", "def ring_shifted(", 1))
    errors = errors_of(diagnose(COURSE.get(SAMPLE), COURSE, root))
    assert any("ring_shift" in e and "missing from the stub" in e for e in errors), errors
    assert any("ring_shifted" in e and "independent implementation" in e for e in errors)


def test_a_stale_course_map_and_a_bench_without_main_are_named(tmp_path):
    root = copy_assignment(SAMPLE, tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace(f"`{SAMPLE}`", "`renamed`", 1))
    (root / "grader" / "bench" / f"{SAMPLE}.py").write_text('"""x"""\ndef run(argv):\n    pass\n')
    errors = errors_of(diagnose(COURSE.get(SAMPLE), COURSE, root))
    assert any("course map is out of date" in e for e in errors), errors
    assert any("defines no `def main(argv" in e for e in errors), errors


def test_a_student_worksheet_out_of_date_with_its_source_is_named(tmp_path):
    source = REPO_ROOT / "solutions" / SAMPLE / "worksheet.ipynb"
    release = REPO_ROOT / "assignments" / SAMPLE / "worksheet.ipynb"
    assert stale_release(source, release, SAMPLE) == []
    notebook = json.loads(source.read_text())
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    cell["source"] = ["A question rewritten after the release.\n"]
    edited = tmp_path / "worksheet.ipynb"
    edited.write_text(json.dumps(notebook))
    problems = stale_release(edited, release, SAMPLE)
    assert problems and "out of date" in problems[0], problems


def test_a_mutation_summary_without_or_with_another_suite_hash_is_a_warning(tmp_path):
    root = copy_assignment(SAMPLE, tmp_path)
    assignment = COURSE.get(SAMPLE)
    path = root / "solutions" / SAMPLE / "mutation_summary.json"
    data = json.loads(path.read_text())
    data.pop("suite_sha256", None)
    path.write_text(json.dumps(data))
    assert "no suite hash" in suite_staleness(assignment, root)
    data["suite_sha256"] = suite_hash(assignment, root)
    path.write_text(json.dumps(data))
    assert suite_staleness(assignment, root) == ""
    suite = root / "grader" / "suites" / SAMPLE
    next(suite.glob("test_*.py")).write_text("# edited\n", encoding="utf-8")
    assert "suites changed" in suite_staleness(assignment, root)
    report = diagnose(assignment, COURSE, root)
    assert [f.level for f in report["mutation summary"]] == [WARN]
    assert ERROR not in {f.level for f in report["mutation summary"]}



def test_a_mutation_summary_whose_provided_modules_changed_is_a_warning(tmp_path):
    """Mutants run with the provided modules (framework's `fused_ops`...), so a change to one
    may change which of them the suites catch. A summary written before they were hashed is
    not checked against them."""
    root = copy_assignment("framework", tmp_path)
    assignment = COURSE.get("framework")
    assert assignment.provided
    path = root / "solutions" / "framework" / "mutation_summary.json"
    data = json.loads(path.read_text())
    data["suite_sha256"] = suite_hash(assignment, root)
    data.pop("provided_sha256", None)
    path.write_text(json.dumps(data))
    assert suite_staleness(assignment, root) == ""
    data["provided_sha256"] = provided_hash(assignment, root)
    path.write_text(json.dumps(data))
    assert suite_staleness(assignment, root) == ""
    provided = root / "assignments" / "framework" / f"{assignment.provided[0]}.py"
    provided.write_text(provided.read_text() + "\n# edited\n", encoding="utf-8")
    assert "provided modules changed" in suite_staleness(assignment, root)


# ---- grader new -------------------------------------------------------------------------------

def new_course(root: Path) -> Path:
    """A course root holding only the manifest and README.md, copied."""
    for name in ("assignments/course.toml", "README.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def test_new_then_doctor_lists_every_todo_it_left(tmp_path, capsys):
    from grader.cli import main

    root = new_course(tmp_path)
    assert main(["--root", str(root), "new", "demo_x", "--title", "Demo X",
                 "--part", "IX. Demos", "--modules", "demo", "helpers"]) == 0
    written = [line.split()[-1] for line in capsys.readouterr().out.splitlines()
               if line.strip().startswith("wrote")]
    course = load_manifest(root / "assignments" / "course.toml")
    assignment = course.get("demo_x")
    assert assignment.modules == ("demo", "helpers") and assignment.title == "Demo X"
    report = diagnose(assignment, course, root)
    todos = "\n".join(f.message for f in report["todo"])
    marked = [p for p in written if "TODO(grader new)" in (root / p).read_text()]
    assert len(marked) >= 15, marked
    for path in marked:
        assert f"TODO {path}:" in todos, f"{path} has a TODO that doctor does not list"
    assert "TODO assignments/course.toml:" in todos
    # What `new` cannot write (a run makes it) is named as missing; the rest is consistent.
    errors = errors_of(report)
    assert any("mutation_summary.json is missing" in e for e in errors)
    assert any("worksheet.ipynb is missing" in e and "worksheets release" in e for e in errors)
    for check in ("readme", "suite", "bench", "signatures", "course map", "worksheet"):
        assert [f for f in report[check] if f.level == ERROR] == [], (check, report[check])
    for path in written:
        if path.endswith(".py"):
            compile((root / path).read_text(), path, "exec")


def test_new_keeps_existing_files_and_needs_a_title_for_an_unknown_id(tmp_path, capsys):
    from grader.cli import main

    root = new_course(tmp_path)
    assert main(["--root", str(root), "new", "demo_y"]) == 2
    assert "--title and --part" in capsys.readouterr().err
    stub = root / "assignments" / "demo_y" / "demo_y.py"
    stub.parent.mkdir(parents=True)
    stub.write_text("# mine\n")
    assert main(["--root", str(root), "new", "demo_y", "--title", "Y", "--part", "P"]) == 0
    assert stub.read_text() == "# mine\n"
    assert "kept  assignments/demo_y/demo_y.py (exists)" in capsys.readouterr().out
    readme = (root / "README.md").read_text()
    assert "[`demo_y`](assignments/demo_y/README.md): Y" in readme


# ---- released contracts ---------------------------------------------------------------------

def test_a_changed_contract_needs_a_dated_changelog_entry(tmp_path):
    from datetime import date

    from grader.instructor.authoring.fingerprint import record_release

    root = copy_assignment(SAMPLE, tmp_path)
    assignment = COURSE.get(SAMPLE)
    released = date(2026, 11, 20)
    assert SAMPLE in record_release(COURSE, root, released)
    assert record_release(COURSE, root, date(2026, 11, 21)) == []  # nothing changed: kept
    assert diagnose(assignment, COURSE, root)["contract"] == []

    stub = root / "assignments" / SAMPLE / "ring.py"
    text = stub.read_text()
    quotes = text.index('"""', text.index("def ring_shift(")) + 3
    stub.write_text(text[:quotes] + "Tightened. " + text[quotes:])  # ring_shift's docstring
    errors = errors_of(diagnose(assignment, COURSE, root))
    assert any("contract changed since the release of 2026-11-20 (stub docstrings)" in e
               and "## Changelog" in e for e in errors), errors

    readme = root / "assignments" / SAMPLE / "README.md"
    readme.write_text(readme.read_text() + "\n## Changelog\n\n- 2026-11-19: an older note.\n")
    assert any("no changelog entry" in e for e in errors_of(diagnose(assignment, COURSE, root)))
    readme.write_text(readme.read_text() + "- 2026-11-22: the docstring of ring_shift says "
                      "more.\n")
    report = diagnose(assignment, COURSE, root)
    assert [f.level for f in report["contract"]] == [WARN]
    assert record_release(COURSE, root, date(2026, 11, 23)) == [SAMPLE]
    assert diagnose(assignment, COURSE, root)["contract"] == []


def test_the_grading_table_and_the_api_are_part_of_the_contract(tmp_path):
    from datetime import date

    from grader.instructor.authoring.fingerprint import grading_table, record_release

    readme_text = "# A\n## 7. Grading\n\ntext\n| a | 1 |\n|---|---|\n## 8. Pitfalls\n| no |\n"
    assert grading_table(readme_text) == ["| a | 1 |", "|---|---|"]
    root = copy_assignment(SAMPLE, tmp_path)
    assignment = COURSE.get(SAMPLE)
    record_release(COURSE, root, date(2026, 11, 20))
    readme = root / "assignments" / SAMPLE / "README.md"
    rows = grading_table(readme.read_text())
    assert rows, "the sample README has a grading table"
    readme.write_text(readme.read_text().replace(rows[-1], rows[-1].replace("|", "| x", 1), 1))
    stub = root / "assignments" / SAMPLE / "ring.py"
    stub.write_text(stub.read_text().replace("def ring_shift(", "def ring_shift2(", 1))
    errors = errors_of(diagnose(assignment, COURSE, root))
    assert any("(stub names/signatures, stub docstrings, README grading table)" in e
               for e in errors), errors
