"""The adversarial corpus graded in few sessions: the cases of one assignment, suite and screen
setting are graded in one pytest session of several implementations, each as if alone.

A case alone (`adversarial.run_case`) costs a grading process: an interpreter, torch, pytest,
collection, a forkserver and the sidecar server. Grouped, the cases of a group share all of
that but the forkserver: grader/instructor/plugin_isolation.py gives each submission its own
sandbox (a fresh forkserver and namespace in which only its folder is readable), its own `-k`
selection and its own screen gate, and reports what outlived its launches. The reports
(results.json, summary.md, junit.xml) are written per case from its run, as `grader grade`
writes them, and judged by the same `adversarial.judge_reports`.

What stays per session, so a case's verdict can only get stricter in a group: a process that
outlived the whole session (none should: each forkserver's namespace ends with it) counts
against every case of the group, and so does the session's peak memory (the cases that bound it,
`max_parent_mb`, form groups of their own). A case that sets `alone` in case.toml (a fork bomb,
a daemon, a disk fill, a planted checkout: checks that need the machine to themselves) is
graded alone as before. `python -m grader adversarial` (`register`, `run_all`) is this module's
command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.instructor import adversarial
from grader.instructor.adversarial import CANARY, CANARY_ENV, Case, CaseResult
from grader.manifest import load_manifest
from grader.report.render import write_reports
from grader.session.runner import run_session, suite_paths
from harness import proctree
from harness.impl import REPO_ROOT, resolve_impl

PER_CASE_TIMEOUT_S = 300.0  # added to the session's limit per case after the first


def group_key(case: Case) -> tuple[str, ...]:
    """The session a case is graded in: (assignment, suite, screen, memory-bounded), or its
    own name when it is graded alone."""
    if case.alone:
        return ("alone", case.name)
    return (case.assignment, case.suite, "screen off" if case.behind_screen else "screen on",
            "peak bounded" if case.max_parent_mb else "")


def groups(cases: list[Case]) -> list[list[Case]]:
    """The cases in their sessions, in corpus order of each session's first case."""
    found: dict[tuple[str, ...], list[Case]] = {}
    for case in cases:
        found.setdefault(group_key(case), []).append(case)
    return list(found.values())


def group_name(cases: list[Case]) -> str:
    """A short stable name for a group (its first case's name, and how many)."""
    return cases[0].name if len(cases) == 1 else f"{cases[0].name}+{len(cases) - 1}"


def run_group(cases: list[Case], *, sandbox: str = "on") -> list[CaseResult]:
    """Grade the cases of one group (`groups`) and judge each; a case marked `alone` (or a
    group of one such) goes through `adversarial.run_case`."""
    if len(cases) == 1 and cases[0].alone:
        return [adversarial.run_case(cases[0], sandbox=sandbox)]
    if any(case.alone or case.plant_checkout for case in cases) or \
            len({group_key(case) for case in cases}) != 1:
        raise ValueError(f"not one group: {[case.name for case in cases]}")
    first = cases[0]
    results = [CaseResult(case=case) for case in cases]
    for case in cases:
        if case.marker:
            Path(case.marker).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlsys-adversarial-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        submissions = []
        for i, (case, result) in enumerate(zip(cases, results)):
            (workdir / f"case{i}").mkdir()
            submissions.append(adversarial._materialise(case, workdir / f"case{i}"))
            result.problems += adversarial.screen_problems(case, submissions[-1])
        suites = REPO_ROOT / "grader" / "suites"
        if first.suite == "public":
            suites = workdir / "no-hidden-suites"
            suites.mkdir()
        impls = [resolve_impl(str(path)) for path in submissions]
        plan = workdir / "isolation.json"
        report = workdir / "isolation-report.json"
        plan.write_text(json.dumps({
            "sandbox": sandbox, "screen": "off" if first.behind_screen else "on",
            "select": {impl.argument: case.select for impl, case in zip(impls, cases)},
            "report": str(report)}), encoding="utf-8")
        extra = ["-p", "grader.instructor.plugin_isolation", "--isolated-impls", str(plan),
                 "--sandbox", "off", "--screen", "off" if first.behind_screen else "on"]
        adversarial._become_subreaper()
        before = proctree.descendants(os.getpid())
        with _canaries():
            session = run_session(
                suite_paths(first.assignment, REPO_ROOT, suites), impls, workers=0,
                timeout=adversarial.GRADE_TIMEOUT_S + PER_CASE_TIMEOUT_S * (len(cases) - 1),
                root=REPO_ROOT, suites=suites, extra=extra)
        left = _survivors(before)
        found = json.loads(report.read_text()) if report.is_file() else {}
        course = load_manifest()
        titles = {a.id: a.title for a in course.assignments}
        for i, (case, result, impl) in enumerate(zip(cases, results, impls)):
            view = session.for_impl(impl)
            result.seconds = view.result.duration if view.result else 0.0
            result.peak_mb = found.get("peak_mb")
            result.survivors = [*found.get("survivors", {}).get(impl.argument, []), *left]
            if view.result is None or session.problem or view.result.collection_errors:
                problem = session.problem or "; ".join(view.result.collection_errors
                                                       if view.result else ())
                result.problems.append(f"grading did not finish normally: {problem} "
                                       f"{session.output_tail[-1200:]}")
                continue
            if not report.is_file():
                result.problems.append("the session wrote no isolation report (survivors, "
                                       "peak memory unknown)")
            out = workdir / f"case{i}" / "out"
            write_reports(view.result, out, titles,
                          {"name": course.name, "version": course.version})
            adversarial.judge_reports(case, result, out)
    for case, result in zip(cases, results):
        if case.marker and Path(case.marker).exists():
            result.problems.append(f"code that must never run did: {case.marker} exists")
            Path(case.marker).unlink(missing_ok=True)
    return results


def _survivors(before: set[int]) -> list[int | str]:
    """Our descendants that were not there before the session and outlived it (orphans come
    back to us: we are a subreaper), then killed: they count against every case."""
    deadline = time.monotonic() + 5
    while True:
        adversarial._reap_adopted()
        survivors = proctree.descendants(os.getpid()) - before
        if not survivors or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in survivors:
        proctree.kill_tree(pid)
    adversarial._reap_adopted()
    return list(sorted(survivors))


@contextmanager
def _canaries() -> Iterator[None]:
    """The canary tokens in our environment (the session inherits it) while the block runs."""
    saved = {key: os.environ.get(key) for key in CANARY_ENV}
    os.environ.update({key: CANARY for key in CANARY_ENV})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def register(sub: argparse._SubParsersAction) -> None:
    """Add `python -m grader adversarial [NAME ...] [--sandbox on|strict]`."""
    parser = sub.add_parser("adversarial", help="grade the adversarial corpus and judge it")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="cases: folder name, number NN or the part after NN_ (default: all)")
    parser.add_argument("--sandbox", choices=("on", "strict"), default="on",
                        help="sandbox mode the cases are graded with (default: on)")
    parser.set_defaults(handler=lambda args, course: run_all(args.names, args.sandbox))


def run_all(names: list[str] | None = None, sandbox: str = "on") -> int:
    """Run the cases, a session per group (`run_group`), print one progress line each and the
    table; 0 when every case is ok."""
    chosen = adversarial.cases(names)
    if not chosen:
        print(f"error: no adversarial case matches {names}", file=sys.stderr)
        return 2
    results: list[CaseResult] = []
    sessions = groups(chosen)
    for i, group in enumerate(sessions, start=1):
        print(f"[{i}/{len(sessions)}] {group_name(group)}: "
              f"{', '.join(case.name.split('_', 1)[0] for case in group)}", flush=True)
        for r in run_group(group, sandbox=sandbox):
            results.append(r)
            verdict = r.skipped and f"skipped ({r.skipped})" or ("ok" if r.ok else "WRONG")
            print(f"        {r.case.name}: {r.score}/{r.max_score} in {r.seconds:.1f} s, "
                  f"peak {r.peak_mb} MiB: {verdict}", flush=True)
    print(adversarial.table(results))
    return 0 if all(r.ok for r in results) else 1
