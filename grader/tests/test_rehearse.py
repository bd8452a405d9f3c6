"""`python -m grader rehearse` and the pull-request steps it runs, on fixture pull requests.

The base is a student release committed to a fresh git repository (built once per module);
each fixture of `grader/tests/fixtures/pr/` becomes a branch (see its README). Each rehearsal
grades `ring_allreduce` with `--select chunk_bounds` (4 public + 3 hidden points), with the
hidden suites of this checkout supplied as the private repository would be.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grader.instructor.rehearse import rehearse
from grader.instructor.release import build_release
from grader.manifest import REPO_ROOT, load_manifest, tomllib
from grader.pr.apply import FILES_JSON, Change, PrFiles, apply_pull_request, editable_paths
from grader.pr.comment import MARKER, render
from grader.pr.grade import grade_command, run_grade, scrubbed_env
from grader.pr.post import Api, PostError, post
from grader.report.render import COMMENT_LIMIT, write_reports
from grader.report.results import RunResult
from grader.report.results import TestResult as Result

FIXTURES = REPO_ROOT / "grader" / "tests" / "fixtures" / "pr"
SELECT = "chunk_bounds"
# The sandbox as much as this machine allows: the rehearsals check scores and comments; strict
# mode is what the workflow passes (test_pr_grade_defaults_to_strict_in_a_clean_env).
SANDBOX = "on"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory) -> Path:
    """A student release, committed as `main` of a fresh repository."""
    repo = tmp_path_factory.mktemp("course") / "student"
    release = build_release(REPO_ROOT, repo, load_manifest())
    assert not release.leaks
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release")
    return repo


def make_head(repo: Path, name: str, spec: dict, fixture: str = "") -> str:
    """Branch `name` off main with fixture's (default: `name`) changes committed."""
    git(repo, "checkout", "-q", "-B", name, "main")
    files = FIXTURES / (fixture or name) / "files"
    for source in sorted(p for p in files.rglob("*") if p.is_file()) if files.is_dir() else []:
        target = repo / str(source.relative_to(files)).removesuffix(".fixture")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    for relative in spec.get("from_solutions", []):
        shutil.copy(REPO_ROOT / "solutions" / relative, repo / "assignments" / relative)
    for relative, text in spec.get("append", []):
        with open(repo / relative, "a", encoding="utf-8") as handle:
            handle.write(text)
    for relative, old, new in spec.get("replace", []):
        path = repo / relative
        assert old in path.read_text(), f"{name}: {old!r} not in {relative}"
        path.write_text(path.read_text().replace(old, new))
    for relative, size in spec.get("generated", {}).items():
        line = "<h1>NOTES</h1> | **bold** | <script>alert(1)</script> @channel\n"
        (repo / relative).write_text((line * (size // len(line) + 1))[:size])
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    git(repo, "checkout", "-q", "main")
    return name


def fixture_names() -> list[str]:
    return sorted(p.parent.name for p in FIXTURES.glob("*/fixture.toml"))


def test_every_fixture_the_issue_names_is_here():
    assert set(fixture_names()) >= {"correct", "partial", "hidden_suite_edit",
                                    "conftest_forces_passes", "workflow_edit",
                                    "huge_markdown_output"}


@pytest.mark.parametrize("name", fixture_names())
def test_rehearsal_scores_and_comments_each_fixture(base_repo, tmp_path, name):
    spec = tomllib.loads((FIXTURES / name / "fixture.toml").read_text())
    head = make_head(base_repo, name, spec)
    done = rehearse(base_repo, "main", head, tmp_path / "out", suites_from=REPO_ROOT,
                    sandbox=SANDBOX, select=SELECT, workers=0, echo=lambda line: None)
    assert done.grade_exit == 0
    assert [c.path for c in done.files.applied] == spec["applied"]
    assert sorted(c.path for c in done.files.ignored) == sorted(spec["ignored"])
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (results["score"], results["extra_data"]["max_score"]) == \
        (spec["score"], spec["max_score"]), name
    hidden = [t for t in results["tests"] if "hidden" in t["tags"]]
    assert len(hidden) == 2, "the hidden suite of the private checkout must be graded"
    comment = done.rendered.comment
    assert comment.startswith(MARKER) and len(comment) <= COMMENT_LIMIT
    headings = [line for line in comment.splitlines() if line.startswith("## ")]
    assert headings == [f"## mlsys-labs grade: {spec['score']} / {spec['max_score']}"]
    assert done.rendered.title == f"Score: {spec['score']} / {spec['max_score']}"
    for text in spec.get("comment_contains", []):
        assert text in comment, f"{name}: {text!r} missing from the comment"
    for text in spec.get("comment_excludes", []):
        assert text not in comment, f"{name}: {text!r} reached the comment"
    assert_tables_intact(comment)
    assert (tmp_path / "out" / "comment.md").read_text() == comment


def assert_tables_intact(comment: str) -> None:
    """Every table row has as many unescaped cell separators as its table's header."""
    width = None
    for line in comment.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        width = width or cells
        assert cells == width, f"a table row was broken: {line[:120]!r}"


def test_a_pull_request_without_editable_changes_grades_nothing(base_repo, tmp_path):
    head = make_head(base_repo, "docs_only", {"generated": {"NOTES.md": 100}})
    done = rehearse(base_repo, "main", head, tmp_path / "out", sandbox=SANDBOX,
                    echo=lambda line: None)
    assert done.grade_exit is None and done.rendered.conclusion == "neutral"
    assert "nothing to grade" in done.rendered.comment and "NOTES.md" in done.rendered.comment
    assert not (tmp_path / "out" / "results.json").exists()


# --- pr-apply ---------------------------------------------------------------------------------


def test_pr_apply_refuses_links_deletions_big_files_and_odd_names(base_repo, tmp_path):
    git(base_repo, "checkout", "-q", "-B", "odd", "main")
    ring = base_repo / "assignments" / "ring_allreduce" / "ring.py"
    ring.unlink()
    ring.symlink_to("../../grader/suites/ring_allreduce/test_chunks.py")
    (base_repo / "assignments" / "zero2" / "zero.py").unlink()
    (base_repo / "assignments" / "ppo" / "ppo.py").write_text("#" * (600 * 1024))
    (base_repo / "assignments" / "paged_kv" / "cache.py").write_text("X = 1\n")
    odd = "assignments/a|b`c\n<img src=x>.py"
    (base_repo / odd).write_text("x = 1\n")
    git(base_repo, "add", "-A")
    git(base_repo, "commit", "-q", "-m", "odd")
    git(base_repo, "checkout", "-q", "main")
    files = apply_pull_request(base_repo, "main", "odd", tmp_path / "clean")
    reasons = {c.path: c.reason for c in files.ignored}
    assert "symlink" in reasons["assignments/ring_allreduce/ring.py"]
    assert "deleted" in reasons["assignments/zero2/zero.py"]
    assert "byte limit" in reasons["assignments/ppo/ppo.py"]
    assert odd in reasons
    assert [c.path for c in files.applied] == ["assignments/paged_kv/cache.py"]
    assert (tmp_path / "clean" / "assignments" / "paged_kv" / "cache.py").read_text() == "X = 1\n"
    stub = (tmp_path / "clean" / "assignments" / "ring_allreduce" / "ring.py")
    assert not stub.is_symlink() and "NotImplementedError" in stub.read_text()
    assert not (tmp_path / "clean" / ".git").exists()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / FILES_JSON).write_text(files.to_json())
    comment = render(tmp_path / "out", load_manifest()).comment
    # Pipes and backticks escaped, the tag broken (a word joiner after the escaped "<").
    assert "<img" not in comment and "a\\|b\\`c &lt;\u2060img src=x&gt;.py" in comment
    assert_tables_intact(comment)


def test_editable_paths_come_from_the_manifest():
    course = load_manifest()
    paths = editable_paths(course)
    assert paths["assignments/ring_allreduce/ring.py"] == "ring_allreduce"
    assert paths["assignments/paged_kv/allocator.py"] == "paged_kv"
    assert not any(p.endswith(("test_public.py", "__init__.py", "README.md")) for p in paths)
    provided = [f"assignments/{a.id}/{m}.py" for a in course.assignments for m in a.provided]
    assert provided and not set(provided) & set(paths)


# --- pr-grade ---------------------------------------------------------------------------------


def test_pr_grade_defaults_to_strict_in_a_clean_env(tmp_path):
    command = grade_command(tmp_path, tmp_path / "out", ["ring_allreduce"])
    assert command[1] == "-I" and command[command.index("--sandbox") + 1] == "strict"
    assert command[command.index("--impl") + 1] == "assignments"
    assert "--no-worksheets" in command  # notebooks run outside the sandbox: opt-in only
    assert "--no-worksheets" not in grade_command(tmp_path, tmp_path, [], worksheets=True)
    env = scrubbed_env({"PATH": "/bin", "HOME": "/h", "GITHUB_TOKEN": "t", "ACTIONS_X": "x",
                        "RUNNER_TEMP": "/r", "PYTHONPATH": "/evil", "LANG": "C.UTF-8"})
    assert env == {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8"}


def test_pr_grade_child_sees_no_secret(tmp_path, monkeypatch):
    """The grading process gets the scrubbed environment and -I, whatever its parent holds."""
    tree = tmp_path / "tree"
    (tree / "grader").mkdir(parents=True)
    (tree / "grader" / "__init__.py").write_text("")
    (tree / "grader" / "cli.py").write_text(
        "import json, os, sys\n"
        "def main():\n"
        "    out = sys.argv[sys.argv.index('--out') + 1]\n"
        "    os.makedirs(out, exist_ok=True)\n"
        "    info = {'env': dict(os.environ), 'isolated': sys.flags.isolated}\n"
        "    open(os.path.join(out, 'env.json'), 'w').write(json.dumps(info))\n"
        "    return 0\n")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_canary")
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", "canary")
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    assert run_grade(tree, tmp_path / "out", ["ring_allreduce"]) == 0
    info = json.loads((tmp_path / "out" / "env.json").read_text())
    assert info["isolated"] == 1
    assert set(info["env"]) <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "LC_CTYPE"}


# --- pr-comment -------------------------------------------------------------------------------


def _run(*tests: Result) -> RunResult:
    return RunResult("assignments", tests)


def _write_valid(out: Path) -> None:
    run = _run(Result("a::t1", "test_one", "ring_allreduce", "public", 3, "passed"),
               Result("", "test_two", "ring_allreduce", "hidden", 2, "failed",
                          reason="expected 5, got 4"))
    write_reports(run, out, {"ring_allreduce": "Ring"}, {"name": "c", "version": "1"})
    change = Change("assignments/ring_allreduce/ring.py", "M", "applied", "", "ring_allreduce")
    (out / FILES_JSON).write_text(PrFiles("b" * 40, "h" * 40, "m" * 40, (change,)).to_json())


def test_pr_comment_renders_from_validated_results(tmp_path):
    _write_valid(tmp_path)
    rendered = render(tmp_path, load_manifest())
    assert rendered.conclusion == "success" and rendered.title == "Score: 3 / 5"
    assert "expected 5, got 4" in rendered.comment
    assert "Problems" not in rendered.comment
    assert "- assignments/ring\\_allreduce/ring.py" in rendered.comment


@pytest.mark.parametrize("tamper", ["float score", "inflated total", "schema", "huge", "bad json",
                                    "missing"])
def test_pr_comment_refuses_tampered_output(tmp_path, tamper):
    _write_valid(tmp_path)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    if tamper == "float score":
        data["tests"][0]["score"] = 3.0
    elif tamper == "inflated total":
        data["score"] = 100
    elif tamper == "schema":
        data["tests"][0]["status"] = "<b>passed</b>"
    path.write_text(json.dumps(data))
    if tamper == "huge":
        path.write_text(" " * (16 * 2**20 + 1))
    elif tamper == "bad json":
        path.write_text("{")
    elif tamper == "missing":
        path.unlink()
    rendered = render(tmp_path, load_manifest())
    assert rendered.conclusion == "failure" and rendered.title == "Grading failed"
    assert "grading failed" in rendered.comment and "Score" not in rendered.comment
    assert "100" not in rendered.comment.split("Problems")[0]


# --- pr-post ----------------------------------------------------------------------------------


class _FakeGitHub(BaseHTTPRequestHandler):
    comments: list[dict] = []
    calls: list[tuple[str, str, dict | None]] = []

    def _reply(self, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def do_GET(self) -> None:
        assert self.headers["Authorization"] == "Bearer tok"
        self.calls.append(("GET", self.path, None))
        self._reply(self.comments if "page=1" in self.path else [])

    def do_POST(self) -> None:
        body = self._body()
        self.calls.append(("POST", self.path, body))
        if self.path.endswith("/comments"):
            self.comments.append({"id": 7, "body": body["body"], "user": {"type": "Bot"}})
        self._reply({"id": 7})

    def do_PATCH(self) -> None:
        body = self._body()
        self.calls.append(("PATCH", self.path, body))
        self.comments[-1]["body"] = body["body"]
        self._reply({"id": 7})

    def log_message(self, *args) -> None:
        pass


def test_pr_post_creates_then_updates_one_sticky_comment():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeGitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = Api(f"http://127.0.0.1:{server.server_address[1]}", "tok")
        _FakeGitHub.comments[:] = [{"id": 3, "body": MARKER + " by a student", "user":
                                    {"type": "User"}}]
        check = {"conclusion": "success", "title": "Score: 3 / 5", "summary": "s"}
        sha = "a" * 40
        assert "created" in post(api, "o/r", 4, sha, MARKER + "\nfirst", check)
        assert "updated comment 7" in post(api, "o/r", 4, sha, MARKER + "\nsecond", check)
        bots = [c for c in _FakeGitHub.comments if c["user"]["type"] == "Bot"]
        assert [c["body"] for c in bots] == [MARKER + "\nsecond"]
        runs = [b for m, p, b in _FakeGitHub.calls if p.endswith("/check-runs")]
        assert len(runs) == 2 and runs[0]["head_sha"] == sha
        assert runs[0]["output"]["title"] == "Score: 3 / 5"
        with pytest.raises(PostError):
            post(api, "o/r", 4, sha, "no marker", check)
        with pytest.raises(PostError):
            post(api, "o/r; rm -rf /", 4, sha, MARKER, check)
    finally:
        server.shutdown()


def test_rehearse_command_line_reports_the_steps(base_repo, tmp_path):
    spec = tomllib.loads((FIXTURES / "partial" / "fixture.toml").read_text())
    head = make_head(base_repo, "cli_partial", spec, fixture="partial")
    done = subprocess.run(
        [sys.executable, "-m", "grader", "rehearse", "--repo", str(base_repo), "--base", "main",
         "--head", head, "--out", str(tmp_path / "out"), "--suites-from", str(REPO_ROOT),
         "--sandbox", SANDBOX, "--select", "chunk_bounds and not rejects", "-n", "0"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for step in ("pr-apply", "pr-suites", "pr-grade", "pr-comment"):
        assert re.search(rf"^{step}\s+\d+\.\d$", done.stdout, re.M), done.stdout[-1500:]
    assert "Score: 6 / 6 (success)" in done.stdout
