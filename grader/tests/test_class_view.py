"""`python -m grader class`: the class report, on a synthetic class built from the course's own
implementations (grader/instructor/classview/synthetic.py), with hostile files beside it."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.cli import main
from grader.instructor.classview import similarity, synthetic
from grader.instructor.classview.render import highlighted, slug
from grader.manifest import load_manifest

COURSE = load_manifest()
SCRIPT = "<script>document.title='owned'</script>"
IMG = "<img src=x onerror=\"document.body.innerHTML='owned'\">"
ODD_STUDENT = "eve<b>bold&amp;"  # a folder name: no slash


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _valid(student_folder: Path, reason: str, name: str = "test_chunk_bounds") -> None:
    test = synthetic.SuiteTest(name, "public", 4, "")
    outcomes = {"ring_allreduce": [synthetic.outcome("ring_allreduce", test, reason)]}
    synthetic.write_submission(student_folder / "run-1", COURSE, outcomes, {}, "hostile")


def _hostile(folder: Path) -> dict[str, str]:
    """Hostile results files: student folder -> the part of the reason it must be skipped for
    ("" for one that is valid and must be shown inert)."""
    plan = {}
    wrong = folder / "wrong-types" / "run-1"
    wrong.mkdir(parents=True)
    (wrong / "results.json").write_text(json.dumps(
        {"score": "100", "tests": {"a": 1}, "extra_data": []}))
    plan["wrong-types"] = "not a grader results file"
    bare = folder / "no-extra-data" / "run-1"
    bare.mkdir(parents=True)
    (bare / "results.json").write_text(json.dumps({"score": 0, "tests": []}))
    plan["no-extra-data"] = "no extra_data"
    garbage = folder / "not-json" / "run-1"
    garbage.mkdir(parents=True)
    (garbage / "results.json").write_text("{\"score\": 1, " + SCRIPT)
    plan["not-json"] = "not a readable results file"
    huge = folder / "huge-file" / "run-1"
    huge.mkdir(parents=True)
    (huge / "results.json").write_text(" " * (16 * 2**20 + 1))
    plan["huge-file"] = "over the"
    other = folder / "other-version"
    _valid(other, "")
    document = json.loads((other / "run-1" / "results.json").read_text())
    document["extra_data"]["course"]["version"] = "1999.1"
    (other / "run-1" / "results.json").write_text(json.dumps(document))
    plan["other-version"] = "graded for course"
    lying = folder / "lying-score"
    _valid(lying, "")
    document = json.loads((lying / "run-1" / "results.json").read_text())
    document["score"] = 1000
    (lying / "run-1" / "results.json").write_text(json.dumps(document))
    plan["lying-score"] = "not the sum"
    # valid, but with markup and a huge reason: shown, inert and clipped
    _valid(folder / "markup", SCRIPT + IMG + "x" * 200_000, name="test_" + "<i>n</i>" * 3)
    plan["markup"] = ""
    _valid(folder / ODD_STUDENT, IMG)
    plan[ODD_STUDENT] = ""
    return plan


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("class")
    folder = base / "class"
    plan = synthetic.build_class(folder, COURSE)
    hostile = _hostile(folder)
    out = base / "report"
    import contextlib
    import io

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        status = main(["class", str(folder), "--out", str(out)])
    assert status == 0, stderr.getvalue()
    return plan, hostile, out, stderr.getvalue()


def test_planted_copies_are_the_top_pairs_and_nothing_else_is_flagged(report):
    plan, _, out, _ = report
    pairs = _rows(out / "pairs.csv")
    for assignment, copier, source in plan.copies:
        ranked = [p for p in pairs if p["assignment"] == assignment]
        top = ranked[0]
        assert {top["first"], top["second"]} == {copier, source}, (
            f"{assignment}: the planted copy {copier} of {source} is not the top pair: {top}")
        assert top["flagged"] == "True"
        assert all(p["flagged"] == "False" for p in ranked[1:]), ranked
    for assignment, a, b in plan.independent:
        found = [p for p in pairs if p["assignment"] == assignment and {p["first"], p["second"]}
                 == {a, b}]
        assert found and float(found[0]["share_first"]) < similarity.FLAG_AT, (
            f"{assignment}: two independent implementations flagged: {found}")
    flagged = {(p["assignment"], frozenset((p["first"], p["second"])))
               for p in pairs if p["flagged"] == "True"}
    assert flagged == {(a, frozenset((c, s))) for a, c, s in plan.copies}


def test_the_stub_is_boilerplate(report):
    _, _, out, _ = report
    # the two students who handed in the untouched stub share all their code, none of it theirs
    assert not [p for p in _rows(out / "pairs.csv") if "stub" in p["first"] + p["second"]]


def test_mutant_failures_are_shown_at_their_tests(report):
    plan, _, out, _ = report
    tests = {(r["assignment"], r["test"]): r for r in _rows(out / "tests.csv")}
    reasons = _rows(out / "reasons.csv")
    expected: dict[tuple[str, str], int] = {}
    for student, (assignment, test, words) in plan.mutant_failures.items():
        expected[(assignment, test)] = expected.get((assignment, test), 0) + 1
        mutant = student.rsplit("-mutant-", 1)[1]
        assert [r for r in reasons if (r["assignment"], r["test"]) == (assignment, test)
                and words in r["first_line"] and mutant in r["first_line"]], (
            f"{student}'s failure is not among the frequent first lines of {test}")
    stubs = 2  # two stub students per assignment fail every test
    odd = {("ring_allreduce", "test_chunk_bounds"): 1}  # ODD_STUDENT's failure
    for assignment in ("ring_allreduce", "ddp"):
        for test in synthetic.declared_tests(assignment):
            key = (assignment, test.name)
            assert int(tests[key]["failed"]) == expected.get(key, 0) + stubs + odd.get(key, 0), (
                f"{key}: {tests[key]}")
            assert int(tests[key]["points_lost"]) == test.points * int(tests[key]["failed"])


def test_hostile_files_are_skipped_by_name_or_shown_inert(report):
    _, hostile, out, stderr = report
    skipped = {r["file"].split("/")[0]: r["why"] for r in _rows(out / "skipped.csv")}
    for student, why in hostile.items():
        if why:
            assert why in skipped.get(student, ""), f"{student}: {skipped.get(student)}"
            assert f"skipped {student}/run-1/results.json" in stderr
        else:
            assert student not in skipped
    pages = list(out.rglob("*.html"))
    for path in pages:
        text = path.read_text(encoding="utf-8")
        assert "<script" not in text and "<img src=x" not in text and "<b>bold" not in text, path
    markup = (out / "submissions" / slug("markup") / "ring_allreduce.html").read_text()
    assert "&lt;script&gt;" in markup and len(markup) < 20_000  # escaped, and clipped
    index = (out / "index.html").read_text()
    for student, why in hostile.items():
        if why:
            assert f"<code>{student}/run-1/results.json</code>" in index


def test_progress_is_reported_on_stderr(report):
    _, _, _, stderr = report
    assert "read " in stderr and "results files" in stderr and "fingerprinting" in stderr


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome")) if p), None)


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (apt-get install chromium; .ci/run installs it "
                    "on CI)")
    plan, _, out, _ = report
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "index.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1200,1400",
                    (out / "index.html").as_uri()], check=True, capture_output=True, timeout=120)
    from PIL import Image

    with Image.open(shot) as image:
        colours = image.convert("L").getextrema()
    assert colours[0] < 100 < colours[1], "the screenshot of the report is blank"
    for page, must in [
        ("index.html", [f"{c} ↔ {s}" for _, c, s in plan.copies] + ["Skipped files",
                                                                     "wrong-types"]),
        ("assignment-ring_allreduce.html", ["Points lost per test", "test_chunk_bounds_split"]),
        (f"submissions/{slug('markup')}/ring_allreduce.html", [SCRIPT[:20]]),
        ("students.html", [ODD_STUDENT]),
    ]:
        dom = subprocess.run([*flags, "--dump-dom", (out / page).as_uri()], check=True,
                             capture_output=True, text=True, timeout=120).stdout
        text = _text_of(dom)
        for words in must:
            assert words in text, f"{page} does not show {words!r} in Chromium"
        # markup from a results file is text: no element was made of it, and nothing ran
        assert "<script" not in dom and 'src="x"' not in dom, f"{page}: markup became elements"
        title = re.search(r"<title>(.*?)</title>", dom, flags=re.S)
        assert title and "owned" not in title.group(1), f"{page}: a script ran in Chromium"


def _text_of(dom: str) -> str:
    """The page's visible text (tags dropped, entities decoded), as Chromium serialised it."""
    import html

    body = re.sub(r"<(style|title)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def test_report_from_the_gradebook(tmp_path):
    from grader.instructor.gradebook import import_results
    from grader.report.gradescope import gradescope_json

    db = tmp_path / "gradebook.db"
    test = synthetic.SuiteTest("test_chunk_bounds", "public", 4, "")
    for student, reason in (("ann", None), ("bob", "wrong")):
        run = synthetic.outcome("ring_allreduce", test, reason)
        path = tmp_path / f"{student}.json"
        from grader.report.results import RunResult

        path.write_text(json.dumps(gradescope_json(
            RunResult("x", (run,)), COURSE.ids, {"name": COURSE.name,
                                                   "version": COURSE.version})))
        import_results(path, student, db, COURSE)
    out = tmp_path / "report"
    assert main(["class", "--gradebook", str(db), "--out", str(out)]) == 0
    scores = {(r["student"], r["assignment"]): r["score"] for r in _rows(out / "scores.csv")}
    assert scores == {("ann", "ring_allreduce"): "4", ("bob", "ring_allreduce"): "0"}
    assert "ann" in (out / "students.html").read_text()


def test_command_needs_a_folder_or_a_gradebook(tmp_path, capsys):
    assert main(["class", "--out", str(tmp_path)]) == 2
    assert main(["class", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 2
    assert "not found" in capsys.readouterr().err


def test_renamed_copy_hides_names_but_not_structure():
    source = (COURSE_ROOT / "grader" / "tests" / "independent" / "ring_allreduce" / "ring.py")
    text = source.read_text()
    copy = synthetic.renamed_copy(text)
    import ast

    names = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
    copied = {n.name for n in ast.parse(copy).body if isinstance(n, ast.FunctionDef)}
    assert names and not names & copied
    a, b = similarity.fingerprint(text), similarity.fingerprint(copy)
    from copydetect import compare_files

    assert min(compare_files(a, b)[1]) > similarity.FLAG_AT


def test_fingerprints_are_deterministic_across_processes():
    import sys

    text = (COURSE_ROOT / "solutions" / "ring_allreduce" / "ring.py").read_text()
    here = sorted(int(h) for h in similarity.fingerprint(text).hashes)[:20]
    code = ("import sys;from grader.instructor.classview.similarity import fingerprint;"
            "print(sorted(int(h) for h in fingerprint(sys.stdin.read()).hashes)[:20])")
    there = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True,
                           text=True, check=True, cwd=COURSE_ROOT).stdout
    assert json.loads(there) == here


def test_highlighted_escapes_code_and_marks_spans():
    assert highlighted("a<b>c", [(1, 4)]) == "a<mark>&lt;b&gt;</mark>c"
    assert highlighted("x&y", [(5, 9), (0, 0)]) == "x&amp;y"


COURSE_ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_runs_on_a_small_generated_class(tmp_path, capsys):
    assert main(["bench", "class_view", "--students", "3", "--assignments", "1",
                 "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 students, 3 submissions, 0 skipped" in out and "total" in out
    assert (tmp_path / "report" / "index.html").is_file()
