"""Argument errors (hidden suite): raised on every rank, before any message is sent."""

from __future__ import annotations

import pytest

from grader.suites.ring_allreduce._cases import P2P_ONLY, TIMEOUT_S, TRANSPORT
from grader.suites.ring_allreduce._ranks import op_errors
from grader.suites.ring_allreduce._ref import SEND_OPS
from grader.suites.ring_allreduce._ref_checks import sections
from harness.cases import case_values, launch_cases

CALLS = [
    ("ring_all_reduce", "mean", "float32"),
    ("ring_all_reduce", "SUM", "float32"),
    ("ring_reduce_scatter", "prod", "float64"),
    ("ring_all_reduce", "avg", "int32"),
    ("ring_all_reduce", "avg", "int64"),
    ("ring_reduce_scatter", "avg", "int64"),
]
EXPECTED = ["ValueError", "ValueError", "ValueError", "TypeError", "TypeError", "TypeError"]


@pytest.fixture(scope="module")
def errors(launch):
    # A call that hangs costs only itself (harness.cases.launch_cases).
    return launch_cases(lambda env: launch(op_errors, 3, args=(CALLS,), forbid=P2P_ONLY,
                                           transport=TRANSPORT, timeout=TIMEOUT_S, env=env),
                        [f"call {index}" for index in range(len(CALLS))])


def answers(errors, want: str) -> list[tuple[tuple[str, str, str], str]]:
    """((function, op, dtype), what rank 0 saw) for every call that must raise `want`."""
    return [(call, case_values(errors.values, f"call {index}",
                               what=f"{call[0]}(op={call[1]!r}) on {call[2]}")[0])
            for index, (call, expected) in enumerate(zip(CALLS, EXPECTED)) if expected == want]


@pytest.mark.exercises("ring_all_reduce", "ring_reduce_scatter")
@pytest.mark.points(1)
def test_unknown_op_raises_value_error(errors):
    for (function, op, dtype), got in answers(errors, "ValueError"):
        if got != "ValueError":
            raise AssertionError(f"{function}(op={op!r}) on {dtype} gave {got}; an unknown op "
                                 "must raise ValueError (ops are case-sensitive)")


@pytest.mark.exercises("ring_all_reduce", "ring_reduce_scatter")
@pytest.mark.points(1)
def test_avg_on_integers_raises_type_error(errors):
    for (function, _op, dtype), got in answers(errors, "TypeError"):
        if got != "TypeError":
            raise AssertionError(f"{function}(op='avg') on {dtype} gave {got}; averaging an "
                                 "integer tensor must raise TypeError")


@pytest.mark.exercises("ring_all_reduce", "ring_reduce_scatter")
@pytest.mark.points(1)
def test_errors_raised_before_sending(errors):
    for index in range(len(CALLS)):
        case_values(errors.values, f"call {index}", what="{}(op={!r}) on {}".format(*CALLS[index]))
    for rank, records in enumerate(errors.comm):
        for index, calls in sections(records).items():
            sent = [r for r in calls if r.op in SEND_OPS]
            if sent:
                function, op, dtype = CALLS[int(index.split()[-1])]
                raise AssertionError(f"[rank {rank} of 3] {function}(op={op!r}) on {dtype} "
                                     f"sent {len(sent)} message(s) before failing; check the "
                                     "arguments before communicating")
