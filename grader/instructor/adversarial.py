"""The adversarial corpus: submissions that attack the grader, each with the score it must get.

`grader/tests/adversarial/cases/<NN_name>/` holds `case.toml` and `submission/` (laid out like
assignments/). A case is graded as a pull request would be — `run_case`: `python -m grader grade
ring_allreduce --impl <submission> --sandbox on` in a fresh process — with canary tokens in the
grader's environment; `adversarial_groups.run_group` grades the cases of one assignment, suite
and screen setting in one session instead, each in a sandbox of its own, and judges them the
same way (cases that set `alone` keep a process of their own). A case passes when the score is
the one it deserves, the reason shown is the expected one, no canary, injected markup or
hidden-suite text (`not_in_reports`) reaches the reports, no marker file appeared (code that
must never run did not), no process outlived the grading, and (where the case sets
`max_parent_mb`) no process of the grading grew past that peak resident memory.

    python -m grader adversarial [NAME ...]      # table: case, score, reason, time, survivors
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.manifest import tomllib
from harness import proctree
from harness.impl import REPO_ROOT

CORPUS = REPO_ROOT / "grader" / "tests" / "adversarial"
INDEPENDENT = REPO_ROOT / "grader" / "tests" / "independent"  # correct, not the reference
ASSIGNMENT = "ring_allreduce"
CANARY = "ghp_adversarialCanary0123456789"
CANARY_ENV = ("GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
              "MLSYS_HIDDEN_SUITES_TOKEN")
GRADE_TIMEOUT_S = 600
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Case:
    """One adversarial submission and what grading it must produce (see case.toml)."""

    name: str
    folder: Path
    attack: str
    select: str
    score: int
    suite: str = "public"
    reason: str = ""
    marker: str = ""
    needs_full_sandbox: bool = False
    not_in_summary: tuple[str, ...] = ()
    not_in_reports: tuple[str, ...] = ()  # in none of results.json, summary.md, junit.xml
    max_parent_mb: int = 0  # peak RSS of any grading process (wait4's ru_maxrss); 0: unchecked
    # The rule the static screen (grader/screen/scan.py) must reject the submission with; "" means
    # the screen must let it through. Checked on the files, before grading.
    screen: str = ""
    # Grade with `--screen off`, to prove the defence behind the screen on its own (the screen
    # is a first line, not a proof); otherwise the case is graded as a pull request would be.
    behind_screen: bool = False
    # Put a second copy of the course (its solutions) in a fresh folder outside the checkout
    # while the case is graded, as an instructor's other checkout or a cache would be.
    plant_checkout: bool = False
    assignment: str = ASSIGNMENT  # the assignment graded (the honest ring is for ring_allreduce)
    # Why the case is graded in a grading process of its own rather than in its group's
    # session (grader/instructor/adversarial_groups.py); "" when it shares one.
    alone: str = ""

    @classmethod
    def load(cls, folder: Path) -> Case:
        data = tomllib.loads((folder / "case.toml").read_text())
        unknown = set(data) - {"attack", "select", "score", "suite", "reason", "marker",
                               "needs_full_sandbox", "not_in_summary", "not_in_reports",
                               "secret", "max_parent_mb", "screen", "behind_screen",
                               "plant_checkout", "assignment", "alone"}
        if unknown or not {"attack", "select", "score"} <= set(data):
            raise ValueError(f"{folder}/case.toml: needs attack, select, score; unknown keys "
                             f"{sorted(unknown)}")
        if data.get("suite", "public") not in ("public", "hidden"):
            raise ValueError(f"{folder}/case.toml: suite must be 'public' or 'hidden'")
        return cls(name=folder.name, folder=folder, attack=data["attack"],
                   select=data["select"], score=int(data["score"]),
                   suite=data.get("suite", "public"), reason=data.get("reason", ""),
                   marker=data.get("marker", ""),
                   needs_full_sandbox=bool(data.get("needs_full_sandbox", False)),
                   not_in_summary=tuple(data.get("not_in_summary", ())),
                   not_in_reports=tuple(data.get("not_in_reports", ())),
                   max_parent_mb=int(data.get("max_parent_mb", 0)),
                   screen=str(data.get("screen", "")),
                   behind_screen=bool(data.get("behind_screen", False)),
                   plant_checkout=bool(data.get("plant_checkout", False)),
                   assignment=str(data.get("assignment", ASSIGNMENT)),
                   alone=str(data.get("alone", "")))


@dataclass
class CaseResult:
    case: Case
    score: int | None = None
    max_score: int | None = None
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    survivors: list[int | str] = field(default_factory=list)  # pids, or named processes
    sandbox: str = ""
    problems: list[str] = field(default_factory=list)
    skipped: str = ""
    peak_mb: int | None = None  # the grading's peak resident memory (its largest process)

    @property
    def ok(self) -> bool:
        return not self.problems


def cases(names: list[str] | None = None) -> list[Case]:
    found = [Case.load(p) for p in sorted((CORPUS / "cases").iterdir())
             if (p / "case.toml").is_file()]
    if names:
        found = [c for c in found if {c.name, *c.name.split("_", 1)} & set(names)]
    return found


def _materialise(case: Case, workdir: Path) -> Path:
    """Copy the submission and drop the honest ring beside it as ring_allreduce/_honest.py."""
    submission = workdir / "submission"
    shutil.copytree(case.folder / "submission", submission)
    if case.assignment == ASSIGNMENT:
        shutil.copy(INDEPENDENT / ASSIGNMENT / "ring.py", submission / ASSIGNMENT / "_honest.py")
    os.chmod(workdir, 0o755)
    for path in [submission, *submission.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return submission


PLANT_PLACES = ("/var/tmp", str(REPO_ROOT.parent))


@contextmanager
def _planted_checkout(wanted: bool) -> Iterator[Path | None]:
    """A copy of the course's solutions in a fresh folder of /var/tmp (or beside the checkout),
    readable by anyone, for the duration of the block; None when not `wanted`."""
    if not wanted:
        yield None
        return
    for place in PLANT_PLACES:
        try:
            folder = Path(tempfile.mkdtemp(prefix="mlsys-planted-", dir=place))
            break
        except OSError:
            continue
    else:
        raise RuntimeError(f"cannot plant a second checkout in any of {PLANT_PLACES}")
    try:
        copy = folder / "course"
        shutil.copytree(REPO_ROOT / "solutions" / ASSIGNMENT, copy / "solutions" / ASSIGNMENT)
        for path in [folder, *folder.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _become_subreaper() -> None:
    """Adopt orphans: a process that escapes its parent (double fork, setsid) is reparented to
    us instead of to init, so `proctree.descendants` still finds it after grading."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reap_adopted(keep: int | None = None) -> None:
    """Collect exited orphans we adopted, so they do not linger as zombies (a zombie still
    counts against the sandbox's process limit). `keep`: a child of ours to leave unreaped."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == keep:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


def _run_reaping(command: list[str], env: dict[str, str],
                 log: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run the grading command, reaping adopted orphans while it runs; output to `log`.

    Also returns the peak resident memory, in MiB, of the largest process of the grading
    (wait4's ru_maxrss covers the command and every descendant it waited for)."""
    with open(log, "w+") as output:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=output,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + GRADE_TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            _reap_adopted(keep=proc.pid)
            if time.monotonic() > deadline:
                proctree.kill_tree(proc.pid)
            time.sleep(0.05)
        output.seek(0)
        text = output.read()
    peak_mb = usage.ru_maxrss // 1024  # KiB on Linux
    return subprocess.CompletedProcess(command, proc.returncode, text, ""), peak_mb


def run_case(case: Case, *, sandbox: str = "on") -> CaseResult:
    """Grade one case in a fresh process and judge the outcome."""
    result = CaseResult(case=case)
    if case.marker:
        Path(case.marker).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlsys-adversarial-") as tmp, \
            _planted_checkout(case.plant_checkout):
        workdir = Path(tmp)
        submission = _materialise(case, workdir)
        suites = REPO_ROOT / "grader" / "suites"
        if case.suite == "public":
            suites = workdir / "no-hidden-suites"
            suites.mkdir()
        out = workdir / "out"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.update({key: CANARY for key in CANARY_ENV})
        command = [sys.executable, "-m", "grader", "grade", case.assignment, "--impl",
                   str(submission), "--suites", str(suites), "--out", str(out), "-n", "0",
                   "--sandbox", sandbox, "--select", case.select]
        if case.behind_screen:
            command += ["--screen", "off"]
        result.problems += screen_problems(case, submission)
        _become_subreaper()
        before = proctree.descendants(os.getpid())
        started = time.monotonic()
        proc, result.peak_mb = _run_reaping(command, env, workdir / "grade.log")
        result.seconds = time.monotonic() - started
        deadline = time.monotonic() + 5
        while True:
            _reap_adopted()
            survivors = proctree.descendants(os.getpid()) - before
            if not survivors or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        result.survivors = list(sorted(survivors))
        for pid in survivors:  # reported above; they must not harm the cases after this one
            proctree.kill_tree(pid)
        _reap_adopted()
        _judge(case, result, proc, out)
    if case.marker and Path(case.marker).exists():
        result.problems.append(f"code that must never run did: {case.marker} exists")
        Path(case.marker).unlink(missing_ok=True)
    return result


def screen_problems(case: Case, submission: Path) -> list[str]:
    """Breaches of the case's `screen` expectation, judged on the submission's files."""
    from grader.manifest import load_manifest
    from grader.screen.scan import screen

    assignment = load_manifest().get(case.assignment)
    verdict = screen("dir", submission, case.assignment,
                     assignment.modules + assignment.extra_editable,
                     assignment.screen_allow, REPO_ROOT)
    rules = {f.rule for f in verdict.findings}
    if case.screen and case.screen not in rules:
        return [f"the static screen must reject it with rule {case.screen}; it found "
                f"{sorted(rules) or 'nothing'}"]
    if not case.screen and rules:
        return [f"the static screen rejects it ({verdict.reason()}); declare `screen` and "
                "`behind_screen` in case.toml, or fix the screen"]
    return []


def _judge(case: Case, result: CaseResult, proc: subprocess.CompletedProcess,
           out: Path) -> None:
    if proc.returncode != 0 or not (out / "results.json").exists():
        tail = (proc.stdout + proc.stderr)[-1500:]
        result.problems.append(f"grading did not finish normally (exit {proc.returncode}): "
                               f"{tail}")
        return
    judge_reports(case, result, out)


def judge_reports(case: Case, result: CaseResult, out: Path) -> None:
    """Judge the reports a finished grading wrote to `out` (results.json, summary.md,
    junit.xml) and what `result` already holds (survivors, peak memory) against `case`."""
    results_path = out / "results.json"
    data = json.loads(results_path.read_text())
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    result.sandbox = str(data.get("extra_data", {}).get("sandbox", {}).get("summary", ""))
    tests = data.get("tests", [])
    if not tests:
        result.problems.append(f"no test matched --select {case.select!r}")
        return
    result.score = int(round(sum(t.get("score", 0) for t in tests)))
    result.max_score = int(round(sum(t.get("max_score", 0) for t in tests)))
    result.reasons = sorted({str(t.get("output", "")).splitlines()[0][:160]
                             for t in tests if t.get("score", 0) < t.get("max_score", 0)
                             and t.get("output")})
    if case.needs_full_sandbox and not result.sandbox.startswith("sandbox: full"):
        result.skipped = f"needs the full sandbox; here: {result.sandbox or 'unknown'}"
        return
    if result.score != case.score:
        result.problems.append(f"scored {result.score}/{result.max_score}, must score "
                               f"{case.score}")
    if case.reason and not any(case.reason in r for r in result.reasons):
        result.problems.append(f"no failure reason mentions {case.reason!r}: {result.reasons}")
    everything = results_path.read_text() + summary
    if (out / "junit.xml").exists():
        everything += (out / "junit.xml").read_text()
    if CANARY in everything:
        result.problems.append("a canary token from the grader's environment reached the reports")
    for needle in case.not_in_summary:
        if needle in summary:
            result.problems.append(f"the PR comment contains injected {needle!r}")
    for needle in case.not_in_reports:
        if needle in everything:
            result.problems.append(f"the reports contain {needle!r}")
    if len(summary) > 65_536:
        result.problems.append(f"the PR comment is {len(summary)} characters, over GitHub's cap")
    if result.survivors:
        result.problems.append(f"processes outlived grading: {result.survivors}")
    if case.max_parent_mb and (result.peak_mb or 0) > case.max_parent_mb:
        result.problems.append(f"a grading process peaked at {result.peak_mb} MiB of memory, "
                               f"over the case's {case.max_parent_mb} MiB")


def table(results: list[CaseResult]) -> str:
    lines = ["| case | attack | score | reason shown | time | survivors | verdict |",
             "|---|---|---:|---|---:|---:|---|"]
    for r in results:
        verdict = f"skipped: {r.skipped}" if r.skipped else ("ok" if r.ok else
                                                              "; ".join(r.problems)[:200])
        score = "-" if r.score is None else f"{r.score}/{r.max_score}"
        reason = (r.reasons[0] if r.reasons else "").replace("|", "\\|")[:90]
        lines.append(f"| {r.case.name} | {r.case.attack[:70]} | {score} | {reason} | "
                     f"{r.seconds:.1f} s | {len(r.survivors)} | {verdict} |")
    return "\n".join(lines)
