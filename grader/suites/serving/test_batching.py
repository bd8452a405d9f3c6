"""Continuous batching pays: no more forwards than the documented plans and fewer than static
batching; per-request metrics (time to first token, time per output token, in steps)."""

from __future__ import annotations

import pytest

from grader.suites.serving._cases import JOBS, expected, jobs_result, value
from grader.suites.serving._ref import roomy_plans, static_steps
from grader.suites.serving._ref_checks import check_run

pytestmark = pytest.mark.exercises("Engine")
ROOMY = ["roomy0", "roomy1", "roomy2"]


@pytest.fixture(scope="module")
def results(launch, impl):
    return jobs_result(launch, impl)


@pytest.mark.points(2)
def test_fewer_steps_than_static_batching(results):
    total_static = total = 0
    for name in ROOMY:
        job, result = JOBS[name], value(results, name, f"the engine run ({name})")
        check_run(job, result, expected(name))
        seqs, budget = job["config"]["max_num_seqs"], job["config"]["max_num_tokens"]
        best = len(roomy_plans(job["requests"], expected(name), seqs, budget))
        static = static_steps(job["requests"], expected(name), seqs, budget)
        if result["num_steps"] > best:
            raise AssertionError(
                f"{result['num_steps']} forwards where continuous batching needs {best} "
                f"(static batching: {static}): admit waiting requests as soon as a slot and "
                "budget are free")
        total, total_static = total + result["num_steps"], total_static + static
    if total >= total_static:
        raise AssertionError(f"{total} forwards, static batching needs {total_static}")


@pytest.mark.points(2)
def test_ttft_and_tpot_in_steps(results):
    single = value(results, "single", "the engine run (one request)")
    check_run(JOBS["single"], single, expected("single"))
    if (single["ttft"][7], single["tpot"][7]) != (3, 1.0):
        raise AssertionError(
            f"one request, 10-token prompt, budget 4, 5 tokens: TTFT {single['ttft'][7]} and "
            f"TPOT {single['tpot'][7]} steps, expected 3 and 1.0 (token_steps holds the "
            "index of the forward that produced each token)")
    for name in ROOMY:
        job, result = JOBS[name], value(results, name, f"the engine run ({name})")
        check_run(job, result, expected(name))
        plans = roomy_plans(job["requests"], expected(name), job["config"]["max_num_seqs"],
                            job["config"]["max_num_tokens"])
        for r in job["requests"]:
            rid = r["request_id"]
            want = [k for k, plan in enumerate(plans) for e in plan if e[0] == rid
                    and e[1] + e[2] >= len(r["prompt"])]
            if result["token_steps"][rid] != want:
                raise AssertionError(
                    f"request {rid}: token_steps {result['token_steps'][rid]}, expected "
                    f"{want}: append the forward's index (engine.num_steps at its launch) "
                    "with each output token")
