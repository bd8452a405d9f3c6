"""The adversarial corpus (grader/tests/adversarial/cases): every attack gets the score it
deserves, with the expected reason, no leaked canary, no injected markup, and no survivor.

The cases of one assignment, suite and screen setting are graded in one pytest session
(grader/instructor/adversarial_groups.py), each submission in a sandbox of its own; a case that
sets `alone` in case.toml gets a `python -m grader grade --sandbox on` process of its own. Each
case is still its own test, in one test class per group: the first test of a group grades the
whole group (once per process, `graded`), and every test judges its own case from that. Under
xdist run them with `--dist loadscope` (the Makefile does), which sends each class to one
worker, so a group is graded once. (`xdist_group` with `--dist loadgroup` was meant to, but
pytest-xdist 3.8 names its groups in the node id, which pytest 9 no longer lets a plugin change:
the marks had no effect, and both workers graded the big groups.) Groups may run side by side:
each judges "no process survived" by its own descendants (the runner adopts orphans as a
subreaper), never by what else runs on the machine.
"""

from __future__ import annotations

import pytest

from grader.instructor import adversarial, adversarial_groups

CASES = adversarial.cases()
GROUPS = adversarial_groups.groups(CASES)
GROUP_OF = {case.name: group for group in GROUPS for case in group}

# The 22 attacks issue 11 lists, plus the honest positive control (00); 23-25: hostile results
# (shared references, stride-0 views, deep nesting) from issue 27; 26-28: attacks on the
# instruments the static screen stops (sys._getframe, getattr to a closure, __import__ ctypes);
# 29: a reason built from a stack walk into the hidden rank function, 30: hostile Markdown in a
# reason (issue 27); 31-33: containment (issue 27): peers' inputs, a setsid daemon, a second
# checkout planted outside this one; 34-38: attacks on the instruments graded behind the screen
# (issue 20: a collective hidden from the log, deleted log records, Triton-named torch wrappers,
# raw loopback sockets, own files grown by a sparse truncate); 39-40 (issue 35): a FIFO for a
# result file, a symlinked stack file; 41: module chains and aliased builtins past the screen;
# 42: an import of grader.tests.independent (a correct implementation) from the checkout; 43: a
# rank that fills the disk with files each under the size limit; 44: moe's hidden all-gather;
# 45: a submission that looks for the others of its session (issue 44: grouped grading).
REQUIRED = {f"{n:02d}" for n in range(46)}


def test_the_corpus_covers_every_listed_attack():
    numbers = {case.name.split("_", 1)[0] for case in CASES}
    assert numbers >= REQUIRED, f"missing cases: {sorted(REQUIRED - numbers)}"
    for case in CASES:
        assert case.attack and case.select, case.name
        assert (case.folder / "submission").is_dir(), f"{case.name}: no submission/"


def test_groups_share_what_a_session_shares():
    """A group's cases agree on what a session fixes (assignment, hidden suites or not, the
    screen); the planted checkout and the declared `alone` cases are graded alone."""
    assert sorted(c.name for g in GROUPS for c in g) == sorted(c.name for c in CASES)
    for group in GROUPS:
        keys = {(c.assignment, c.suite, c.behind_screen, bool(c.max_parent_mb)) for c in group}
        assert len(keys) == 1, [c.name for c in group]
        if any(c.alone or c.plant_checkout for c in group):
            assert len(group) == 1, [c.name for c in group]
    assert all(c.alone for c in CASES if c.plant_checkout), "a planted checkout is seen by all"


@pytest.fixture(scope="session")
def graded() -> dict[str, adversarial.CaseResult]:
    """Each case's result, filled a group at a time as the tests ask for them."""
    return {}


def judge_case(case: adversarial.Case, graded: dict[str, adversarial.CaseResult]) -> None:
    """Grade the case's group if this process has not yet, then judge the case."""
    if case.name not in graded:
        for result in adversarial_groups.run_group(GROUP_OF[case.name]):
            graded[result.case.name] = result
    result = graded[case.name]
    if result.skipped:
        pytest.skip(result.skipped)
    assert result.ok, (
        f"{case.name} ({case.attack}): " + "; ".join(result.problems)
        + f" [score {result.score}/{result.max_score}, reasons {result.reasons}, "
        f"{result.sandbox}]")


def _group_class(group: list[adversarial.Case]) -> type:
    """A test class holding one test per case of `group` (xdist's `loadscope` unit)."""

    @pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in group])
    def test_attack_is_graded_correctly(self, case, graded):
        judge_case(case, graded)

    name = "TestGroup" + group[0].name.split("_", 1)[0]
    return type(name, (), {"test_attack_is_graded_correctly": test_attack_is_graded_correctly,
                           "__doc__": f"The cases of {adversarial_groups.group_name(group)}."})


for _group in GROUPS:
    _cls = _group_class(_group)
    globals()[_cls.__name__] = _cls


def test_table_reports_each_case():
    case = CASES[0]
    done = adversarial.CaseResult(case=case, score=4, max_score=4, seconds=1.5)
    wrong = adversarial.CaseResult(case=case, score=4, max_score=4,
                                   problems=["scored 4/4, must score 0"])
    text = adversarial.table([done, wrong])
    assert text.count(f"| {case.name} |") == 2
    assert "| ok |" in text and "must score 0" in text
