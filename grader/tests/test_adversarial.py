"""The adversarial corpus (grader/tests/adversarial/cases): every attack gets the score it
deserves, with the expected reason, no leaked canary, no injected markup, and no survivor.

Each case grades a submission in a fresh `python -m grader grade --sandbox on` process. Cases
may run side by side under xdist: each judges "no process survived" by its own descendants (the
runner adopts orphans as a subreaper), never by what else runs on the machine.
"""

from __future__ import annotations

import pytest

from grader.instructor import adversarial

CASES = adversarial.cases()

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
# rank that fills the disk with files each under the size limit.
REQUIRED = {f"{n:02d}" for n in range(44)}


def test_the_corpus_covers_every_listed_attack():
    numbers = {case.name.split("_", 1)[0] for case in CASES}
    assert numbers >= REQUIRED, f"missing cases: {sorted(REQUIRED - numbers)}"
    for case in CASES:
        assert case.attack and case.select, case.name
        assert (case.folder / "submission").is_dir(), f"{case.name}: no submission/"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_attack_is_graded_correctly(case):
    result = adversarial.run_case(case)
    if result.skipped:
        pytest.skip(result.skipped)
    assert result.ok, (
        f"{case.name} ({case.attack}): " + "; ".join(result.problems)
        + f" [score {result.score}/{result.max_score}, reasons {result.reasons}, "
        f"{result.sandbox}]")


def test_table_reports_each_case():
    case = CASES[0]
    done = adversarial.CaseResult(case=case, score=4, max_score=4, seconds=1.5)
    wrong = adversarial.CaseResult(case=case, score=4, max_score=4,
                                   problems=["scored 4/4, must score 0"])
    text = adversarial.table([done, wrong])
    assert text.count(f"| {case.name} |") == 2
    assert "| ok |" in text and "must score 0" in text
