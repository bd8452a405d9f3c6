"""What the ring_allreduce hidden suite runs: launch settings, the inputs of its cases, the one
launch of many cases, and the fixes a launch failure's raw first line does not say.

Inputs are small integers (or multiples of 1/64) so that every sum, max, min and product is exact
in every dtype, float16 and bfloat16 included, whatever order the ranks add in; only `avg`
rounds. A `Case` is one call under test; `launch_sweep` runs a list of them in one launch, each
in its own error scope, and a case that hangs costs only itself (`harness.cases.launch_cases`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.suites.ring_allreduce._ranks import rank_cases
from grader.suites.ring_allreduce._ref import chunk_slices
from harness import P2P_APIS, Forbid, LaunchResult, NotImplementedInRank
from harness.cases import Memo, launch_cases

TIMEOUT_S = 60.0
# The limit of tests that exist to catch deadlocks. A deadlock is found by the stall watch in
# seconds (every rank asleep); this wall clock only ends a loop that spins, and it is as long
# as TIMEOUT_S so that a correct shift on a loaded machine is never ended by it.
HANG_TIMEOUT_S = TIMEOUT_S
LARGE_PRIME = 10007
OPS = ("sum", "avg", "max", "min", "product")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int32, torch.int64)

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


def case_name(index: int) -> str:
    """The name `_ranks.rank_cases` gives the case at `index` (and its log window)."""
    return f"case {index}"


def rank_args(cases: Sequence[Case], world_size: int) -> list[tuple[list[dict[str, Any]]]]:
    return [([c.to_rank(r) for c in cases],) for r in range(world_size)]


def launch_sweep(launch: Callable[..., LaunchResult], cases: Sequence[Case], world_size: int, *,
                 groups: Sequence[tuple[int, ...]] = (), forbid: Forbid = P2P_ONLY,
                 timeout: float = TIMEOUT_S) -> LaunchResult:
    """Every case in one launch of `world_size` ranks (`_ranks.rank_cases`), each in its own
    error scope and log window ("case <i>"); `groups` are the subgroups the cases use, created
    on every rank before the first case. The traffic goes through the sidecars (`TRANSPORT`).

    A case that hangs (or ends the launch otherwise) costs only itself: the launch is made
    again without it (`harness.cases.launch_cases`), and reading it raises what ended the
    launch, its first line naming the case."""
    return launch_cases(lambda env: launch(
        rank_cases, world_size, args=(list(groups),), rank_args=rank_args(cases, world_size),
        forbid=forbid, transport=TRANSPORT, timeout=timeout, env=env),
        [case_name(index) for index in range(len(cases))])


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


# ---- failures whose raw first line does not say what to fix ---------------------------------

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
SUBGROUP_HINTS = (SUBGROUP_HANG, *FAILURE_HINTS)


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
    """One launch per key within a test module (see harness.cases.Memo), errors explained by
    `hints`."""
    return Memo(explain=lambda exc: explained(exc, hints))
