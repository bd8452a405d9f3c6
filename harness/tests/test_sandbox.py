"""The sandbox: another user, no network but loopback, hidden suites, no secrets, capped memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import sandbox

PROBE = Path(__file__).with_name("sandbox_probe.py")


@pytest.fixture(scope="module")
def report():
    proc = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def full_sandbox_expected() -> bool:
    """bwrap on Linux, and (as root) a checkout the unprivileged rank user can reach."""
    if shutil.which("bwrap") is None or not sys.platform.startswith("linux"):
        return False
    repo = Path(__file__).resolve().parents[2]
    return os.geteuid() != 0 or all(os.stat(p).st_mode & 0o005 == 0o005
                                    for p in [repo, *repo.parents])


def test_status_says_what_was_applied(report):
    status = report["status"]
    assert status["summary"].startswith(f"sandbox: {status['mode']}")
    if full_sandbox_expected() and status["mode"] != "full":
        pytest.fail(f"bwrap is installed but the sandbox is degraded: {status['summary']}")
    if status["mode"] == "degraded":
        assert status["missing"] and "degraded — " in status["summary"]


def test_ranks_still_communicate_over_loopback(report):
    assert [r["all_reduce"] for r in report["ranks"]] == [3.0, 3.0]


def test_the_environment_is_scrubbed(report):
    for rank in report["ranks"]:
        assert "MLSYS_FAKE_TOKEN" not in rank["env"]
        assert not any(k.startswith(("GITHUB_", "ACTIONS_", "RUNNER_")) for k in rank["env"])


def test_hidden_paths_internet_and_writes_are_out_of_reach(report):
    if report["status"]["mode"] != "full":
        pytest.skip(f"not checked here: {report['status']['summary']}")
    for rank in report["ranks"]:
        visible = rank["visible"]
        assert not any(v for p, v in visible.items() if not p.endswith("harness")), visible
        assert visible[next(p for p in visible if p.endswith("harness"))]
        assert rank["internet"] is False and rank["repo_writable"] is False
        if os.geteuid() == 0:  # a user of its own per rank, no host account's
            assert rank["uid"] >= sandbox.RANK_UID_FIRST
    if os.geteuid() == 0:
        assert len({rank["uid"] for rank in report["ranks"]}) == len(report["ranks"])


def test_no_other_checkout_home_or_host_process_is_visible(report):
    if report["status"]["mode"] != "full":
        pytest.skip(f"not checked here: {report['status']['summary']}")
    for rank in report["ranks"]:
        assert rank["planted_visible"] is False, "a second copy of the course is visible"
        # bwrap's init, the forkserver and the two ranks of this launch
        assert rank["processes"] <= 4, f"{rank['processes']} processes visible"


def test_ranks_cannot_open_each_others_folders(report):
    if not any("user of its own" in item for item in report["status"]["applied"]):
        pytest.skip(f"ranks share a user here: {report['status']['summary']}")
    assert [rank["peer_folder"] for rank in report["ranks"]] == ["closed", "closed"]


def test_a_daemon_fails_the_launch_and_does_not_survive(report):
    assert report["daemon"].startswith("SurvivorError"), report["daemon"]
    assert report["daemon_alive"] == []


def test_memory_is_capped(report):
    if not any("memory" in item for item in report["status"]["applied"]):
        pytest.skip(f"not checked here: {report['status']['summary']}")
    assert report["memory"] != "allocated 3 GiB"
    assert "killed by SIGKILL" in report["memory"] or "MemoryError" in report["memory"]


def _bound(args: list[str]) -> set[str]:
    """The host paths a bwrap command line makes visible (bound or linked)."""
    out = set()
    for i, arg in enumerate(args):
        if arg in ("--ro-bind", "--bind"):
            out.add(args[i + 1])
        elif arg == "--symlink":
            out.add(args[i + 2])
    return out


def _visible(path: Path, bound: set[str]) -> bool:
    return any(str(path) == b or str(path).startswith(b.rstrip("/") + "/") for b in bound)


def test_the_checkout_is_allow_listed(tmp_path):
    """Ranks see the harness, the stubs and the grader modules rank functions import; not
    grader/tests (correct implementations of every assignment), the instructor tools, the
    hidden suites, solutions or .git (checked on the command line: bwrap is not needed)."""
    from grader.session.prepare import RANK_CHECKOUT

    repo = Path(sandbox.REPO_ROOT)
    config = sandbox.SandboxConfig(checkout=RANK_CHECKOUT)
    bound = _bound(sandbox._bwrap_args(config, str(tmp_path)))
    for needed in ("harness/launcher.py", "assignments/ring_allreduce/ring.py",
                   "grader/__init__.py", "grader/seeds.py", "grader/compare.py"):
        assert _visible(repo / needed, bound), f"{needed} must be visible to ranks"
    for secret in ("grader/tests/independent", "grader/instructor", "grader/suites",
                   "solutions", ".git", "grader/cli.py", "docs"):
        assert not _visible(repo / secret, bound), f"{secret} must not be visible to ranks"


def test_the_suites_import_only_listed_grader_modules():
    """Rank functions run in the sandbox with the grader modules their suite imports: each must
    be under `RANK_CHECKOUT` (the suites themselves travel by value)."""
    import re

    repo = Path(sandbox.REPO_ROOT)
    pattern = re.compile(r"^\s*(?:from|import) (grader(?:\.\w+)*)", re.MULTILINE)
    files = [*(repo / "grader" / "suites").rglob("*.py"),
             *(repo / "assignments").glob("*/test_public.py")]
    from grader.session.prepare import RANK_CHECKOUT

    listed = [part.removesuffix(".py").replace("/", ".") for part in RANK_CHECKOUT]
    for file in files:
        for name in pattern.findall(file.read_text()):
            if name == "grader.suites" or name.startswith("grader.suites."):
                continue
            assert any(name == m or name.startswith(m + ".") for m in listed), (
                f"{file.relative_to(repo)} imports {name}, which ranks cannot see: add it to "
                f"grader.session.prepare.RANK_CHECKOUT")
