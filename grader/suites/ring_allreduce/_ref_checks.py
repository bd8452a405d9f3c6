"""The checks of the ring_allreduce hidden suite, in the parent: what one launch of many cases
(`_cases.launch_sweep`) returned, judged against the references (`_ref`): values, in-place
contracts, untouched gaps of strided views, and each call's traffic against the ring's budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.ring_allreduce._cases import (
    FAILURE_HINTS,
    Case,
    FailureHint,
    case_name,
    explained,
)
from grader.suites.ring_allreduce._ranks import GAP_FILL
from grader.suites.ring_allreduce._ref import (
    chunk_slices,
    raise_cost_problems,
    reference,
    ring_cost_problems,
)
from harness import CommRecord, LaunchResult, NotImplementedInRank
from harness.cases import case_values, where
from harness.commlog import windows


def check_case(case: Case, values: Sequence[Any], world_size: int) -> None:
    """Raise AssertionError (first line: what, where, the likely fix) if a case is wrong."""
    members = case.members(world_size)
    n = len(members)
    if case.call in ("all_reduce", "reduce_scatter"):
        expected_full = reference(case.op, [case.inputs[r] for r in members])
    for position, rank in enumerate(members):
        got = values[rank]
        what = f"{where(rank, world_size)} {case.label}"
        if got is None:
            raise AssertionError(f"{what}: the rank returned no result")
        if case.call == "all_reduce":
            _check_in_place(got, what)
            _check_written(got, case, rank, expected_full, what)
            assert_close(got["out"], expected_full, what=what, scale=n if case.op == "avg" else 1,
                         hint=_reduce_hint(case.op, case.layout))
        elif case.call == "reduce_scatter":
            start, end = chunk_slices(case.inputs[rank].numel(), n)[position]
            expected = expected_full.reshape(-1)[start:end]
            assert_close(got["out"], expected, what=f"{what}: this rank's chunk",
                         scale=n if case.op == "avg" else 1,
                         hint="return chunk p (p = group rank) as a new 1-D tensor")
            if not torch.equal(got["after"], case.inputs[rank]):
                raise AssertionError(f"{what}: the input tensor was modified; "
                                     "ring_reduce_scatter must work on a copy")
            # Its own storage: at most the largest chunk, ceil(D / N) elements, not a view that
            # keeps a full-size work buffer alive.
            largest = -(-case.inputs[rank].numel() // n) * case.inputs[rank].element_size()
            if got["out_storage"] is not None and got["out_storage"] > largest:
                raise AssertionError(
                    f"{what}: the returned chunk is a view into a buffer larger than the chunk, "
                    "which keeps the whole tensor alive; return it with its own storage, e.g. "
                    "clone the slice (README §5)")
        elif case.call == "all_gather":
            _check_in_place(got, what)
            assert_close(got["out"], case.extra["full"], what=what,
                         hint="every chunk must come from its owner, in place")
        elif case.call == "shift":
            source = members[(position - 1) % n]
            assert_close(got["out"], case.inputs[source], what=what,
                         hint=f"rank {rank} must receive what rank {source} (its predecessor) "
                              "sent")
            if not torch.equal(got["after"], case.inputs[rank]):
                raise AssertionError(f"{what}: ring_shift modified its input")
        if got["gaps"] is not None and not bool((got["gaps"] == GAP_FILL).all()):
            raise AssertionError(f"{what}: elements outside the strided view were overwritten; "
                                 "write back only through the view (e.g. tensor.copy_(...))")


def _check_in_place(got: dict[str, Any], what: str) -> None:
    if not got["returned_input"]:
        raise AssertionError(f"{what}: did not return the tensor it was given; it works in "
                             "place and returns `tensor` itself")
    if not isinstance(got["out"], torch.Tensor) or not torch.equal(got["out"], got["after"]):
        raise AssertionError(f"{what}: the returned tensor and the input differ after the call")


def _check_written(got: dict[str, Any], case: Case, rank: int, expected: torch.Tensor,
                   what: str) -> None:
    """An all-reduce whose result differs from its input must change the tensor it was given."""
    given = case.inputs[rank]
    if not torch.equal(expected, given) and torch.equal(got["after"], given):
        contiguous = case.layout == "contiguous"
        raise AssertionError(
            f"{what}: the tensor is unchanged after the call; "
            f"{'write the result into tensor itself' if contiguous else 'copy the result back through the view, e.g. tensor.copy_(result)'}")  # noqa: E501


def _reduce_hint(op: str | None, layout: str) -> str:
    # f-strings: the grader's reason keeps failure messages, and scrubs a hidden suite's data
    if layout != "contiguous":
        return f"a {layout} input needs the result copied back through the view"
    if op == "avg":
        return f"divide the sum by N exactly once (op={op!r})"
    if op == "product":
        return f"multiply, do not add, for op={op!r}"
    return ""


def case_results(cases: Sequence[Case], rank_outcomes: Sequence[Any], world_size: int,
                 kind: str | None = None, hints: Sequence[FailureHint] = FAILURE_HINTS
                 ) -> dict[int, list[Any]]:
    """{case index: every rank's value} for the cases of `kind` (every case if None).

    `rank_outcomes[r]` is what rank r's `_ranks.rank_cases` returned. A case that raised (on
    any rank) raises here: a stub as "not implemented" (before anything else, so a test of a
    stubbed function never reports values or cost), any other error as an AssertionError naming
    the call, with the likely fix first where the raw error does not say it (`hints`; a case
    that hung is one).
    """
    values: dict[int, list[Any]] = {}
    failures: list[AssertionError] = []
    for index, case in enumerate(cases):
        if kind is not None and case.kind != kind:
            continue
        try:
            values[index] = case_values(rank_outcomes, case_name(index), what=case.label)
        except AssertionError as exc:
            failures.append(explained(exc, hints))
    stubs = [exc for exc in failures if isinstance(exc, NotImplementedInRank)]
    if stubs or failures:
        raise (stubs or failures)[0]
    return values


def check_all(cases: Sequence[Case], rank_outcomes: Sequence[Any], world_size: int,
              kind: str, hints: Sequence[FailureHint] = FAILURE_HINTS) -> None:
    """check_case for every case of `kind`; the message leads with the first failure."""
    values = case_results(cases, rank_outcomes, world_size, kind, hints)
    failures = []
    for index, case_values_ in values.items():
        try:
            check_case(cases[index], case_values_, world_size)
        except AssertionError as exc:
            failures.append(str(exc))
    if failures:
        more = f" (and {len(failures) - 1} more failing case(s))" if len(failures) > 1 else ""
        first, _, rest = failures[0].partition("\n")
        raise AssertionError(f"{first}{more}\n{rest}".rstrip())


# ---- communication log ----------------------------------------------------------------------

def sections(records: Sequence[CommRecord]) -> dict[str, list[CommRecord]]:
    """Split one rank's log at its `mark` records: label -> the calls made after it."""
    return windows(records)


def case_calls(result: LaunchResult, num_cases: int) -> list[dict[int, list[CommRecord]]]:
    """Per case of a `launch_sweep` launch, each rank's calls while it ran (rank -> records)."""
    logs = [sections(records) for records in result.comm]
    return [{rank: log.get(case_name(index), []) for rank, log in enumerate(logs)}
            for index in range(num_cases)]


def check_ring_traffic(cases: Sequence[Case], result: LaunchResult, world_size: int,
                       hints: Sequence[FailureHint] = FAILURE_HINTS) -> None:
    """The traffic of every ring collective of a `launch_sweep` launch with D >= N elements
    (N: its group's size) against the ring's budget (`ring_cost_problems`); raises with the
    largest violation first. A call that raised fails here first: it has no traffic to judge."""
    case_results(cases, result.values, world_size, hints=hints)
    problems = []
    for case, calls in zip(cases, case_calls(result, len(cases)), strict=True):
        members, numel = case.members(world_size), case.inputs[0].numel()
        if numel < len(members):
            continue
        phases = 2 if case.call == "all_reduce" else 1
        problems += ring_cost_problems({rank: calls[rank] for rank in members}, members, numel,
                                       phases, case.label, world_size,
                                       case.inputs[0].element_size())
    raise_cost_problems(problems)
