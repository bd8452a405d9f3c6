"""Overlap scheduling (README §6), checked on the CPU.

What is tested, exactly: with Engine(overlap=True),
  1. outputs equal one-request-at-a-time generation (so plain mode's), and every plan keeps
     the scheduler's rules, on roomy, tight (preemption) and prefix-cached workloads, through
     step() and through Engine.generate (plain and overlapped);
  2. the model's event log (`TinyLM.events`, with "schedule" and "step" marks added by the
     test around Engine.step() and Scheduler.schedule()) shows the overlap: every step() call
     that begins with a forward in flight calls schedule() before taking that forward's
     result, and at least one step() call does so; every plain-mode step() call begins with
     nothing in flight.
"""

from __future__ import annotations

import pytest

from grader.suites.serving._cases import JOBS, expected, jobs_result, value
from grader.suites.serving._ref_checks import check_run

pytestmark = pytest.mark.exercises("Engine")
OVERLAP = ["overlap_roomy0", "overlap_roomy1", "overlap_roomy2", "overlap_tight0",
           "overlap_tight1", "overlap_tight2", "overlap_cache_tight0", "overlap_cache_tight1"]


@pytest.fixture(scope="module")
def results(launch, impl):
    return jobs_result(launch, impl)


def check_events(events: list[str], overlap: bool) -> None:
    in_flight: set[str] = set()
    step_open: set[str] | None = None  # forwards in flight when the current step() began
    scheduled = False
    overlapped = 0
    for event in events:
        kind, _, index = event.partition(" ")
        if kind == "step":
            if in_flight and not overlap:
                raise AssertionError("overlap=False: a step() began with a forward in flight; "
                                     "plain mode takes each forward's result in its own step")
            step_open, scheduled = set(in_flight), False
        elif kind == "schedule":
            scheduled = True
            if step_open:
                overlapped += 1
        elif kind == "launch":
            in_flight.add(index)
        elif kind == "result":
            if overlap and step_open and index in step_open and not scheduled:
                raise AssertionError(
                    f"overlap=True: the result of forward {index} was taken before the next "
                    "schedule() call; with overlap, plan step N+1 while step N is in flight, "
                    "then take step N's result")
            in_flight.discard(index)
    if overlap and not overlapped:
        raise AssertionError("overlap=True: no schedule() call was made while a forward was in "
                             "flight; launch step N+1's plan and return with it in flight")


GROUPS = {"memory=roomy": OVERLAP[:3], "memory=tight": OVERLAP[3:6],
          "prefix_cache=on": OVERLAP[6:]}
GENERATE = {"memory=roomy": [], "memory=tight": ["generate_tight0_overlap=False",
                                                 "generate_tight0_overlap=True"],
            "prefix_cache=on": ["generate_cache_tight0_overlap=False",
                                "generate_cache_tight0_overlap=True"]}


@pytest.mark.points(2)
@pytest.mark.parametrize("group", list(GROUPS))
def test_overlap_outputs_equal_plain_mode(results, group):
    for name in GROUPS[group]:
        result = value(results, name, f"the engine run ({name}, overlap=True)")
        check_run(JOBS[name], result, expected(name))
    for name in GENERATE[group]:
        got = value(results, name, f"Engine.generate ({name})")
        want = expected(name)
        if got != want:
            bad = sorted(rid for rid in want if got.get(rid) != want[rid])
            raise AssertionError(f"Engine.generate ({name}): outputs of requests {bad} differ "
                                 "from one-request-at-a-time generation")


@pytest.mark.points(2)
def test_overlap_plans_the_next_step_while_one_is_in_flight(results):
    for name in OVERLAP:
        result = value(results, name, f"the engine run ({name})")
        if result["error"] and len(result["plans"]) <= 2:
            # the evidence for "no overlap" needs a run that got going: a crash comes first
            raise AssertionError(f"the overlapped engine run ({name}) raised "
                                 f"{result['error']} in step {len(result['plans'])}, before "
                                 "the overlap could be seen")
        check_events(result["events"], overlap=True)
    for name in ("roomy0", "tight0"):
        check_events(value(results, name, f"the engine run ({name})")["events"], overlap=False)
