"""Engine + Scheduler on random workloads (hypothesis): the rules of every plan (budget,
max_num_seqs, decodes first, first come first served, preemption of the newest, blocks
released), every request finished, outputs token-identical to one-request-at-a-time
generation — with roomy memory, under memory pressure (preemption), with chunked prefill,
with requests arriving over time and with the prefix cache under pressure."""

from __future__ import annotations

import pytest

from grader.suites.serving._cases import JOBS, expected, jobs_result, value
from grader.suites.serving._ref import roomy_plans
from grader.suites.serving._ref_checks import check_run

pytestmark = pytest.mark.exercises("Engine")


@pytest.fixture(scope="module")
def results(launch, impl):
    return jobs_result(launch, impl)


def judged(results: dict, name: str) -> dict:
    result = value(results, name, f"the engine run ({name})")
    check_run(JOBS[name], result, expected(name))
    return result


@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["roomy0", "roomy1", "roomy2"],
                         ids=[f"memory=roomy-workload={i}" for i in range(3)])
def test_roomy_memory_outputs_and_rules(results, name):
    judged(results, name)


@pytest.mark.points(2)
@pytest.mark.parametrize("names", [["roomy1"], ["chunked0", "chunked_edge"], ["chunked1"]],
                         ids=["budget=16-workload=1", "budget=4-workload=0",
                              "budget=4-workload=1"])
def test_plans_are_the_documented_ones(results, names):
    """Without memory pressure or a cache the plans are fully specified (README §3)."""
    for name in names:
        plans_match(results, name)


def plans_match(results: dict, name: str) -> None:
    result = judged(results, name)
    job = JOBS[name]
    want = roomy_plans(job["requests"], expected(name), job["config"]["max_num_seqs"],
                       job["config"]["max_num_tokens"])
    got = [{tuple(e) for e in plan["batch"]} for plan in result["plans"] if plan["batch"]]
    for k, (g, w) in enumerate(zip(got, want)):
        if g != w:
            raise AssertionError(
                f"plan {k} differs from the documented one: got (id, start, tokens) "
                f"{sorted(g)}, expected {sorted(w)}; decodes first, then the prefill that "
                "goes on, then admissions in arrival order, chunking the last")
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} non-empty plans, expected {len(want)}")


@pytest.mark.points(3)
@pytest.mark.parametrize("name", ["tight0", "tight1", "tight2"],
                         ids=[f"memory=tight-workload={i}" for i in range(3)])
def test_memory_pressure_preemption(results, name):
    judged(results, name)


@pytest.mark.points(3)
@pytest.mark.parametrize("names", [["chunked0", "chunked_edge"], ["chunked1"]],
                         ids=["budget=4-workload=0", "budget=4-workload=1"])
def test_chunked_prefill(results, names):
    for name in names:
        judged(results, name)


@pytest.mark.points(3)
def test_requests_arriving_over_time(results):
    judged(results, "arrivals")


@pytest.mark.points(4)
@pytest.mark.parametrize("names", [["cache_tight0", "cache_own_hit"], ["cache_tight1"]],
                         ids=["prefix_cache=on-memory=tight-workload=0",
                              "prefix_cache=on-memory=tight-workload=1"])
def test_prefix_cache_under_memory_pressure(results, names):
    for name in names:
        judged(results, name)
