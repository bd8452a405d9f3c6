"""Parent-side helpers of the ring_allreduce hidden suite: inputs, references and cost checks.

Nothing here imports the code under test. Expected values are plain torch reductions over the
ranks' inputs, computed in float64 / int64 and cast to the tested dtype. Inputs are small
integers (or multiples of 1/64) so that every sum, max, min and product is exact in every
dtype, float16 and bfloat16 included, whatever order the ranks add in; only `avg` rounds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.ring_allreduce._ranks import GAP_FILL, rank_cases
from harness import P2P_APIS, CommRecord, Forbid, LaunchResult, NotImplementedInRank
from harness.cases import Memo, case_values, where
from harness.commlog import windows

TIMEOUT_S = 60.0
# The limit of tests that exist to catch deadlocks. A deadlock is found by the stall watch in
# seconds (every rank asleep); this wall clock only ends a loop that spins, and it is as long
# as TIMEOUT_S so that a correct shift on a loaded machine is never ended by it.
HANG_TIMEOUT_S = TIMEOUT_S
LARGE_PRIME = 10007
OPS = ("sum", "avg", "max", "min", "product")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int32, torch.int64)
SEND_OPS = ("send", "isend")

P2P_ONLY = Forbid(allow_only=P2P_APIS, rule=(
    "ring_allreduce allows only point-to-point calls (send, recv, isend, irecv, "
    "batch_isend_irecv); build the collective from them"))
# Every multi-rank launch of this suite sends its traffic through per-rank sidecars outside the
# rank (harness/sidecar.py): forbidden collectives and a forged log are judged there.
TRANSPORT = "sidecar"
SHIFT_ONLY = Forbid(allow_only=frozenset({"send", "recv"}), rule=(
    "ring_shift uses only blocking dist.send and dist.recv; order them so nothing deadlocks"))


# ---- inputs ---------------------------------------------------------------------------------

def make_input(gen: torch.Generator, shape: Sequence[int], dtype: torch.dtype,
               op: str) -> torch.Tensor:
    """Random values chosen so `op` over up to 6 ranks is exact in `dtype` (no overflow)."""
    shape = tuple(shape)
    if op == "product":
        values = torch.tensor([-2, -1, 1, 2])[torch.randint(0, 4, shape, generator=gen)]
    elif op in ("max", "min"):
        values = torch.randint(-100, 101, shape, generator=gen)
    else:
        values = torch.randint(-8, 9, shape, generator=gen)
    if dtype in (torch.float32, torch.float64) and op in ("sum", "avg"):
        return (values * 8 + torch.randint(-8, 9, shape, generator=gen)).to(dtype) / 64
    return values.to(dtype)


def reference(op: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """`op` over `tensors` (one per rank, group order), in the tensors' dtype."""
    dtype = tensors[0].dtype
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stacked = torch.stack([t.to(wide) for t in tensors])
    reduce = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "max": lambda s: s.amax(0),
              "min": lambda s: s.amin(0), "product": lambda s: s.prod(0)}[op]
    return reduce(stacked).to(dtype)


def chunk_slices(numel: int, size: int) -> list[tuple[int, int]]:
    """The chunks the README specifies (parent's own copy, never the code under test's)."""
    base, extra = divmod(numel, size)
    starts = [i * base + min(i, extra) for i in range(size + 1)]
    return [(starts[i], starts[i + 1]) for i in range(size)]


# ---- cases ----------------------------------------------------------------------------------

@dataclass
class Case:
    """One call under test: what to run, each rank's input, and how to describe it."""

    label: str  # shown to students: names the call, op, dtype and size class, never values
    call: str
    op: str | None
    inputs: list[torch.Tensor]  # one per global rank (unused for ranks outside `group`)
    group: tuple[int, ...] | None = None
    layout: str = "contiguous"
    kind: str = "values"  # the test group that judges it
    extra: dict[str, Any] = field(default_factory=dict)
    meet: bool = True  # False: runs at the same time as the next case (a disjoint group)

    def to_rank(self, rank: int) -> dict[str, Any]:
        return {"call": self.call, "op": self.op, "group": self.group, "layout": self.layout,
                "x": self.inputs[rank], "meet": self.meet}

    def members(self, world_size: int) -> tuple[int, ...]:
        return self.group if self.group is not None else tuple(range(world_size))


def rank_args(cases: Sequence[Case], world_size: int) -> list[tuple[list[dict[str, Any]]]]:
    return [([c.to_rank(r) for c in cases],) for r in range(world_size)]


def launch_cases(launch: Callable[..., LaunchResult], cases: Sequence[Case], world_size: int, *,
                 groups: Sequence[tuple[int, ...]] = (), forbid: Forbid = P2P_ONLY,
                 timeout: float = TIMEOUT_S) -> LaunchResult:
    """Every case in one launch of `world_size` ranks (`_ranks.rank_cases`), each in its own
    error scope and log window ("case <i>"); `groups` are the subgroups the cases use, created
    on every rank before the first case. The traffic goes through the sidecars (`TRANSPORT`)."""
    return launch(rank_cases, world_size, args=(list(groups),),
                  rank_args=rank_args(cases, world_size), forbid=forbid, transport=TRANSPORT,
                  timeout=timeout)


def reduction_case(gen: torch.Generator, label: str, call: str, op: str, shape: Sequence[int],
                   dtype: torch.dtype, world_size: int, **kw: Any) -> Case:
    inputs = [make_input(gen, shape, dtype, op) for _ in range(world_size)]
    return Case(label, call, op, inputs, **kw)


def gather_case(gen: torch.Generator, label: str, shape: Sequence[int], dtype: torch.dtype,
                world_size: int, group: tuple[int, ...] | None = None, **kw: Any) -> Case:
    """all_gather: each member holds its own chunk of one full tensor; the rest is garbage."""
    full = make_input(gen, shape, dtype, "max")
    members = group if group is not None else tuple(range(world_size))
    bounds = chunk_slices(full.numel(), len(members))
    inputs = []
    for rank in range(world_size):
        mine = torch.full_like(full, 111).reshape(-1)
        if rank in members:
            start, end = bounds[members.index(rank)]
            mine[start:end] = full.reshape(-1)[start:end]
        inputs.append(mine.reshape(full.shape))
    return Case(label, "all_gather", None, inputs, group=group, extra={"full": full}, **kw)


# ---- judging --------------------------------------------------------------------------------

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
                 kind: str | None = None) -> dict[int, list[Any]]:
    """{case index: every rank's value} for the cases of `kind` (every case if None).

    `rank_outcomes[r]` is what rank r's `_ranks.rank_cases` returned. A case that raised (on
    any rank) raises here: a stub as "not implemented" (before anything else, so a test of a
    stubbed function never reports values or cost), any other error as an AssertionError naming
    the call, with the likely fix first where the raw error does not say it.
    """
    values: dict[int, list[Any]] = {}
    failures: list[AssertionError] = []
    for index, case in enumerate(cases):
        if kind is not None and case.kind != kind:
            continue
        try:
            values[index] = case_values(rank_outcomes, f"case {index}", what=case.label)
        except AssertionError as exc:
            failures.append(explained(exc))
    stubs = [exc for exc in failures if isinstance(exc, NotImplementedInRank)]
    if stubs or failures:
        raise (stubs or failures)[0]
    return values


def check_all(cases: Sequence[Case], rank_outcomes: Sequence[Any], world_size: int,
              kind: str) -> None:
    """check_case for every case of `kind`; the message leads with the first failure."""
    values = case_results(cases, rank_outcomes, world_size, kind)
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
    """Per case of a `launch_cases` launch, each rank's calls while it ran (rank -> records)."""
    logs = [sections(records) for records in result.comm]
    return [{rank: log.get(f"case {index}", []) for rank, log in enumerate(logs)}
            for index in range(num_cases)]


@dataclass(frozen=True, order=True)
class CostProblem:
    """One violation of a ring's budget; sorting puts the most severe first.

    `severity`: 0 bytes over budget, 1 messages to a rank other than the successor, 2 the
    wrong number of messages (values before bytes before messages); `excess`: how far over,
    larger first within a severity.
    """

    severity: int
    excess: float
    text: str = field(compare=False)


def ring_cost_problems(logs: dict[int, list[CommRecord]], members: Sequence[int], numel: int,
                       phases: int, what: str, world_size: int, itemsize: int = 0
                       ) -> list[CostProblem]:
    """Problems with one ring collective's traffic; `phases` is 2 (all-reduce) or 1.

    Every member sends exactly phases * (n - 1) messages, all to its successor in the group,
    totalling at most phases * ceil(numel / n) * (n - 1) elements (of `itemsize` bytes each;
    0: taken from the log). Sort the result (`sorted`) to have the largest violation first.
    """
    n = len(members)
    problems = []
    for position, rank in enumerate(members):
        successor = members[(position + 1) % n]
        sends = [r for r in logs.get(rank, []) if r.op in SEND_OPS]
        tag = f"{where(rank, world_size)} {what}"
        total = sum(r.numel for r in sends)
        budget = phases * math.ceil(numel / n) * (n - 1) if n else 0
        if total > budget:
            size = itemsize or (sends[0].bytes // max(sends[0].numel, 1))
            sent, allowed = sum(r.bytes for r in sends) or total * size, budget * size
            ratio = f"{total / budget:.1f}× " if budget else ""
            problems.append(CostProblem(0, float(sent - allowed), (
                f"{tag}: sent {sent} bytes, {ratio}the ring's budget of {allowed}: send one "
                f"chunk of about D/N elements per step, never the whole tensor (budget "
                f"{phases}·ceil(D/N)·(N-1) elements for D={numel}, N={n})")))
        stray = sorted({r.peer for r in sends if r.peer != successor}, key=str)
        if stray:
            problems.append(CostProblem(1, float(len(stray)), (
                f"{tag}: sent to rank(s) {stray}; in a ring rank {rank} only sends to its "
                f"successor, rank {successor}")))
        wanted = phases * (n - 1)
        if len(sends) != wanted:
            problems.append(CostProblem(2, float(abs(len(sends) - wanted)), (
                f"{tag}: sent {len(sends)} messages; a ring sends exactly {wanted} "
                f"({phases}·(N-1) for N={n}), one chunk per step"
                f"{'' if sends else '; send through dist.send/isend, never around them'}")))
    return problems


def check_ring_traffic(cases: Sequence[Case], result: LaunchResult, world_size: int) -> None:
    """The traffic of every ring collective of a `launch_cases` launch with D >= N elements
    (N: its group's size) against the ring's budget (`ring_cost_problems`); raises with the
    largest violation first. A call that raised fails here first: it has no traffic to judge."""
    case_results(cases, result.values, world_size)
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


def raise_cost_problems(problems: Sequence[CostProblem], limit: int = 20) -> None:
    """Raise an AssertionError whose first line is the largest violation; the others below."""
    if not problems:
        return
    ordered = sorted(problems)
    more = f" (and {len(ordered) - 1} more below)" if len(ordered) > 1 else ""
    rest = [p.text for p in ordered[1:limit]]
    if len(ordered) > limit:
        rest.append(f"... {len(ordered) - limit} more")
    raise AssertionError("\n".join([ordered[0].text + more, *rest]))


def blocking_deadlock(calls: dict[int, list[tuple[str, int | None]]]) -> str | None:
    """Replay blocking send/recv calls as if every send waited for its receiver.

    `calls[rank]` is that rank's ("send" | "recv", peer) sequence. Returns None when every call
    completes, else a sentence saying where each stuck rank waits. This is how NCCL, and gloo
    for messages too big to buffer, behave; code that only works because a send returned early
    deadlocks there.
    """
    queues = {rank: deque(seq) for rank, seq in calls.items()}
    progressed = True
    while progressed and any(queues.values()):
        progressed = False
        for rank, queue in queues.items():
            if not queue or queue[0][0] != "send":
                continue
            peer = queue[0][1]
            other = queues.get(peer)
            if other and other[0][0] == "recv" and other[0][1] in (rank, None):
                queue.popleft()
                other.popleft()
                progressed = True
    stuck = {rank: queue[0] for rank, queue in queues.items() if queue}
    if not stuck:
        return None
    waits = ", ".join(f"rank {r} in {op} {'to' if op == 'send' else 'from'} {peer}"
                      for r, (op, peer) in sorted(stuck.items()))
    return f"would deadlock if sends wait for their receiver: {waits}"


# ---- shared launches ------------------------------------------------------------------------

@dataclass(frozen=True)
class FailureHint:
    """A launch failure whose raw first line does not say what to fix: text found in the error
    (`match`) and the fix (`message`); keyword arguments, so the grader's reason keeps them."""

    match: str
    message: str


SELF_PEER = FailureHint(match="Pair is not connected", message=(
    "a rank sent to or received from itself: take positions from dist.get_rank(group) and map "
    "them to global ranks with dist.get_process_group_ranks(group)"))
FAILURE_HINTS = (
    SELF_PEER,
    FailureHint(match="should not be the same as the rank of the current",
                message=SELF_PEER.message),
    FailureHint(match="did not finish within", message=(
        "a deadlock? blocking sends must be ordered (README §3), and every rank must make the "
        "same sequence of calls")),
)
SUBGROUP_HANG = FailureHint(match="did not finish within", message=(
    "hung only with subgroups: a rank's position is dist.get_rank(group), not its global "
    "rank; map positions to peers with dist.get_process_group_ranks(group)"))


def explained(exc: AssertionError, hints: Sequence[FailureHint] = FAILURE_HINTS
              ) -> AssertionError:
    """`exc`, or an AssertionError whose first line leads with the likely fix."""
    if isinstance(exc, NotImplementedInRank):
        return exc  # the stub: keep it recognisable as "not implemented"
    text = str(exc)
    for hint in hints:
        if hint.match in text:
            first, _, rest = text.partition("\n")
            return AssertionError(f"{hint.message} ({first})\n{rest}".rstrip())
    return exc


def explained_launch(make: Callable[[], LaunchResult],
                     hints: Sequence[FailureHint] = FAILURE_HINTS) -> LaunchResult:
    """`make()` (one launch), its failure raised again with the likely fix first (`explained`)."""
    try:
        return make()
    except AssertionError as exc:
        raise explained(exc, hints) from None


def launch_memo(hints: Sequence[FailureHint] = FAILURE_HINTS) -> Memo:
    """One launch per key within a test module (see harness.cases.Memo): errors explained by
    `hints`, and after a timeout later launches get `HANG_TIMEOUT_S` at most."""
    return Memo(explain=lambda exc: explained(exc, hints), hang_timeout=HANG_TIMEOUT_S)
