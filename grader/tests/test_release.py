"""`python -m grader release`: what a student repository holds, and the leak check.

The release is built once per module (a few seconds); planted leaks go into copies of it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import grader.cli as cli
import grader.instructor.release as release_module
from grader.instructor.release import ReleaseError, build_release, is_shipped
from grader.instructor.release_leaks import collect_secrets, find_leaks
from grader.manifest import REPO_ROOT, load_manifest, tomllib


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "student"
    done = build_release(REPO_ROOT, out, load_manifest())
    assert done.leaks == (), "\n".join(map(str, done.leaks))
    return out


def files_of(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_release_holds_the_student_repository_and_nothing_instructor_only(release):
    files = files_of(release)
    for expected in ("README.md", "Makefile", "venv.mk", "pyproject.toml", "requirements.txt",
                     "constraints.txt", "conftest.py", ".gitignore", "assignments/course.toml",
                     ".github/workflows/advisory.yml", ".github/workflows/grade.yml",
                     "grader/cli.py", "grader/session/plugin.py", "grader/pr/apply.py",
                     "grader/schemas/results.schema.json", "harness/launcher.py"):
        assert expected in files, expected
    for a in load_manifest().assignments:
        for module in a.modules + a.provided + ("test_public",):
            assert f"assignments/{a.id}/{module}.py" in files
        assert f"assignments/{a.id}/README.md" in files
    forbidden = re.compile(r"^(solutions/|grader/instructor/|grader/suites/|grader/tests/|"
                           r"harness/tests/|\.ci/|docs/)|mutants/|__pycache__")
    assert not [f for f in files if forbidden.search(f)]


def test_no_instructor_module_ships_and_every_shipped_module_imports(release):
    """The release leaves out grader/instructor/ as a folder; what ships imports on its own
    (no solutions/, no gradebook), and the CLI offers only the subcommands present."""
    files = files_of(release)
    assert not [f for f in files if f.startswith("grader/instructor/")]
    assert (REPO_ROOT / "grader" / "instructor" / "selfcheck.py").is_file()
    modules = sorted(
        ".".join(Path(f).with_suffix("").parts).removesuffix(".__init__")
        for f in files if f.startswith("grader/") and f.endswith(".py"))
    assert "grader.pr.comment" in modules and "grader.worksheets.grading" in modules
    script = ("import importlib, sys\n"
              "sys.path.insert(0, '.')\n"
              f"for name in {modules!r}:\n"
              "    importlib.import_module(name)\n"
              "assert not [m for m in sys.modules if m.startswith('grader.instructor')]\n"
              "from grader.cli import _parser\n"
              "sub = next(a for a in _parser()._actions if a.dest == 'command')\n"
              "print(' '.join(sorted(sub.choices)))\n")
    done = subprocess.run([sys.executable, "-I", "-c", script], cwd=release,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    commands = set(done.stdout.split())
    assert {"grade", "list", "bench", "pr-apply", "pr-grade", "pr-comment", "pr-post"} <= commands
    assert not commands & {"selfcheck", "release", "gradebook", "rehearse", "adversarial",
                           "worksheets"}, commands
    assert not (release / "solutions").exists()


def test_templates_are_filled_and_match_the_course(release):
    course = load_manifest()
    for name in ("README.md", "Makefile", ".github/workflows/grade.yml"):
        text = (release / name).read_text()
        assert not re.search(r"@[A-Z_]+@", text), f"{name}: a placeholder is left"
    readme = (release / "README.md").read_text()
    for path in ("assignments/ring_allreduce/ring.py", "assignments/paged_kv/allocator.py"):
        assert f"`{path}`" in readme
    assert "hidden" in readme.lower() and "advisory" in readme and "make test" in readme
    assert 'SUITES_REPO: "${{ vars.HIDDEN_SUITES_REPO }}"' in \
        (release / ".github/workflows/grade.yml").read_text()
    student = tomllib.loads((release / "pyproject.toml").read_text())
    ours = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert student["project"] == ours["project"], "the release template's [project] drifted"
    assert student["tool"]["pytest"]["ini_options"]["testpaths"] == ["assignments"]
    assert course.name in readme


def test_release_refuses_bad_arguments(tmp_path):
    course = load_manifest()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ReleaseError, match="not an empty folder"):
        build_release(REPO_ROOT, tmp_path / "full", course)
    with pytest.raises(ReleaseError, match="OWNER/NAME"):
        build_release(REPO_ROOT, tmp_path / "new", course, hidden_suites_repo="a b")
    with pytest.raises(ReleaseError, match="inside the checkout"):
        build_release(REPO_ROOT, REPO_ROOT / "assignments" / "out", course)


def test_shipping_rules():
    assert is_shipped("assignments/ring_allreduce/ring.py")
    assert is_shipped("grader/pr/comment.py") and is_shipped("constraints.txt")
    for path in ("solutions/ring_allreduce/ring.py", "grader/suites/ppo/test_gae.py",
                 "grader/tests/test_cli.py", "grader/instructor/adversarial.py",
                 "harness/tests/x.py", "docs/trust.md", ".github/workflows/ci.yml",
                 "grader/instructor/release_leaks.py", "grader/instructor/selfcheck.py"):
        assert not is_shipped(path), path
    assert is_shipped("grader/suites/ppo/test_gae.py", self_study=True)
    assert not is_shipped("solutions/ppo/ppo.py", self_study=True)


# --- the leak check -----------------------------------------------------------------------------


def test_secrets_cover_solutions_mutants_and_hidden_tests():
    secrets = collect_secrets(REPO_ROOT)
    origins = {s.origin for s in secrets.bodies}
    assert "solutions/ring_allreduce/ring.py::ring_all_reduce" in origins
    assert "grader/suites/ring_allreduce/test_chunks.py::test_chunk_bounds_split" in origins
    assert any(o.startswith("solutions/ring_allreduce/mutants/") for o in origins)
    assert secrets.names["calls_all_reduce"].startswith("mutant name")
    assert "test_chunk_bounds_split" in secrets.names
    assert "test_chunk_bounds" not in secrets.names, "a public test name is no secret"
    assert "test_width_781" in secrets.names, "a test a factory made is a hidden test too"
    stub_names = {n.name for n in ast.walk(ast.parse(
        (REPO_ROOT / "assignments/ring_allreduce/ring.py").read_text()))
        if isinstance(n, ast.FunctionDef)}
    assert "ring_all_reduce" in stub_names


def _solution_function(name: str) -> str:
    source = (REPO_ROOT / "solutions/ring_allreduce/ring.py").read_text()
    node = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(source, node) or ""


def test_planted_leaks_are_each_found(release, tmp_path):
    planted = tmp_path / "planted"
    shutil.copytree(release, planted)
    body = _solution_function("ring_all_reduce")
    # 1. a solution body under another name, reformatted (the AST still matches)
    renamed = body.replace("def ring_all_reduce(", "def my_reduce(", 1)
    (planted / "assignments/ring_allreduce/extra.py").write_text(
        "import torch\n\n\n" + ast.unparse(ast.parse(renamed)) + "\n")
    # 2. the same body pasted into prose, indented differently
    (planted / "NOTES.md").write_text("Some notes\n\n" + "\n".join(
        "      " + line for line in body.splitlines()[1:]) + "\n")
    # 3. a mutant's name; 4. a hidden test file, renamed
    (planted / "assignments/ring_allreduce/README.md").write_text(
        "Beware the calls_all_reduce trap.\n")
    shutil.copy(REPO_ROOT / "grader/suites/ring_allreduce/test_chunks.py",
                planted / "assignments/ring_allreduce/test_more.py")
    # 5. an instructor-only path
    (planted / "solutions").mkdir()
    (planted / "solutions" / "readme.txt").write_text("empty\n")
    leaks = [str(leak) for leak in find_leaks(REPO_ROOT, planted)]
    text = "\n".join(leaks)
    origin = "solutions/ring_allreduce/ring.py::ring_all_reduce"
    assert f"assignments/ring_allreduce/extra.py: the body of solution {origin}" in text
    assert f"NOTES.md: the source of solution {origin}" in text
    assert "assignments/ring_allreduce/README.md: mutant name ring_allreduce/calls_all_reduce" \
        in text
    assert "assignments/ring_allreduce/test_more.py: hidden test name" in text
    assert "test_chunks.py::test_chunk_bounds_split" in text
    assert "solutions/readme.txt: instructor-only path" in text
    assert not [leak for leak in leaks if leak.startswith(("grader/", "harness/"))]


def test_release_command_fails_and_lists_a_planted_leak(tmp_path, monkeypatch, capsys):
    templates = tmp_path / "templates"
    shutil.copytree(release_module.TEMPLATES, templates)
    suite = (REPO_ROOT / "grader/suites/ring_allreduce/test_errors.py").read_text()
    (templates / "HINTS.md").write_text("```python\n" + suite + "\n```\n")
    monkeypatch.setattr(release_module, "TEMPLATES", templates)
    assert cli.main(["release", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "must not be published" in err
    assert "HINTS.md: the body of hidden test grader/suites/ring_allreduce/test_errors.py" in err
    assert "HINTS.md: hidden test name" in err


def test_self_study_release_ships_suites_but_never_solutions(tmp_path, capsys):
    out = tmp_path / "self"
    assert cli.main(["release", "--out", str(out), "--self-study", "--no-record"]) == 0
    assert "no solution body, mutant" in capsys.readouterr().out
    files = files_of(out)
    assert "grader/suites/ring_allreduce/test_chunks.py" in files
    assert not [f for f in files if f.startswith("solutions/") or "/mutants/" in f]
    assert 'SUITES_REPO: ""' in (out / ".github/workflows/grade.yml").read_text()
    assert "self-study" in (out / "README.md").read_text()


def test_hidden_suites_repo_is_written_into_the_grade_workflow(tmp_path):
    build_release(REPO_ROOT, tmp_path / "r", load_manifest(), hidden_suites_repo="prof/course-src")
    assert 'SUITES_REPO: "prof/course-src"' in (tmp_path / "r/.github/workflows/grade.yml") \
        .read_text()


# --- the release works on its own ---------------------------------------------------------------


def test_release_make_test_scores_the_stubs_zero_and_succeeds(release):
    """A student's `make test`: public tests graded, stubs 0 points, exit status 0."""
    venv = REPO_ROOT / ".venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MLSYS_"))}
    done = subprocess.run(
        ["make", "-C", str(release), "-o", f"{venv}/.installed", "test", f"VENV={venv}",
         "ARGS=ring_allreduce -n 0 --select chunk_bounds"],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (release / "grading" / "summary.md").read_text()
    assert "## mlsys-labs grade: 0 / " in summary and "not implemented yet" in summary
    assert "hidden" not in summary.split("### ring")[1]  # no hidden suites shipped
    shutil.rmtree(release / "grading")


def test_release_grades_with_hidden_suites_supplied_from_outside(release, tmp_path):
    """`python -m grader grade --suites PATH` in a release: the suites' own imports of
    grader.suites.<id>._common resolve to PATH, and the hidden tests are graded."""
    done = subprocess.run(
        [sys.executable, "-m", "grader", "grade", "ring_allreduce", "--impl",
         str(REPO_ROOT / "solutions"), "--suites", str(REPO_ROOT / "grader" / "suites"),
         "--out", str(tmp_path / "out"), "-n", "0", "--select", "chunk_bounds"],
        cwd=release, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    hidden = [t for t in results["tests"] if "hidden" in t["tags"]]
    assert hidden and all(t["score"] == t["max_score"] for t in results["tests"])


def test_pr_comment_runs_in_a_release_without_torch(release, tmp_path):
    """The comment job installs jsonschema only: pr-comment must not import torch."""
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('torch', 'numpy', 'nbgrader', 'harness'):\n"
               "            raise ModuleNotFoundError(name)\n"
               "sys.meta_path.insert(0, Block())\n"
               "sys.path.insert(0, '.')\n"
               "from grader.cli import main\n"
               "sys.argv[0] = 'grader'\n"
               "raise SystemExit(main())\n")
    done = subprocess.run([sys.executable, "-I", "-c", blocker, "pr-comment", "--out",
                           str(tmp_path / "out")], cwd=release, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Grading failed (failure)" in done.stdout  # no artifact: it says so, no score
    assert (tmp_path / "out" / "comment.md").read_text().startswith("<!-- mlsys-labs:grade -->")
