"""Issue 36 on moe: a case that hangs costs only its own points, on an idle machine and beside
CPU hogs alike.

The mutant `empty_rank_skips_backward` is a realistic bug: a rank whose experts receive no rows
skips the backward all-to-all, so in the one layer case with such a rank (4 ranks, top-2) the
other ranks wait in that collective for ever. The 4-rank launch holds that case beside the
all_to_all_tokens cases and the other layer cases. The stall watch ends the launch, and
`harness.cases.launch_cases` makes it again without the hung case (grader/suites/moe/_cases.py),
so the mutant loses exactly that case's two tests, with the cause first, however loaded the
machine is (the grade once depended on it: 97/100 idle, 75/100 beside eight CPU hogs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader.session.runner import run_session
from grader.suites.moe._cases import A2A_SPECS, LAYER_SPECS, layer_name
from harness.impl import resolve_impl

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "grader" / "suites" / "moe"
MUTANT = "mutant:moe/empty_rank_skips_backward"
HUNG_CASE = "world_size=4-k=2-capacity_factor=None-one_rank_receives_nothing"
# Every 4-rank test that reads the launch the hang is in: the layer's values and the
# all_to_all_tokens cases (which this mutant leaves byte-identical to the solution's).
LAYER_TESTS = [f"{SUITE / 'test_layer.py'}::test_{phase}[world_size=4-{name}]"
               for phase in ("forward", "backward")
               for name in (layer_name(k, cf, empty is not None)
                            for k, cf, _, empty in LAYER_SPECS[4])]
A2A_TESTS = [f"{SUITE / 'test_all_to_all.py'}::test_{phase}[world_size=4-{name}]"
             for phase in ("forward", "backward") for name in A2A_SPECS[4]]
HOGS = 4
CAUSE = "a rank left out a collective, every rank must make every all-to-all"


def _grade(load: int) -> tuple[int, int, dict[str, str]]:
    """(score, max score, {failed test: its reason}) of the mutant on the 4-rank tests, with
    `load` CPU-bound processes running beside the grading session."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        session = run_session([*LAYER_TESTS, *A2A_TESTS], resolve_impl(MUTANT), timeout=1200)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert session.result is not None and not session.problem, session.problem or session.tail
    failed = {t.name: t.reason for t in session.result.tests if not t.passed}
    return session.result.score, session.result.max_score, failed


def test_a_hung_moe_case_costs_only_its_points_idle_and_under_load():
    idle_score, max_score, idle_failed = _grade(load=0)
    hung = {f"test_forward[{HUNG_CASE}]", f"test_backward[{HUNG_CASE}]"}
    assert set(idle_failed) == hung, idle_failed
    assert max_score - idle_score == 3, (idle_score, max_score)  # 2 + 1 points of that case
    for name, reason in idle_failed.items():
        assert CAUSE in reason.splitlines()[0], (name, reason)
    loaded_score, _, loaded_failed = _grade(load=HOGS)
    assert (loaded_score, set(loaded_failed)) == (idle_score, hung), loaded_failed
