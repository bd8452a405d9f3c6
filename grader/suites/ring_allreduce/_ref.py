"""References of the ring_allreduce hidden suite, in the parent: the reductions, the README's
chunks, and the ring's cost model (its budget of messages and bytes, and a replay of blocking
calls that finds a deadlock).

Nothing here imports the code under test. Expected values are plain torch reductions over the
ranks' inputs, computed in float64 / int64 and cast to the tested dtype.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from harness import CommRecord
from harness.cases import where

SEND_OPS = ("send", "isend")


def reference(op: str | None, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """`op` over `tensors` (one per rank, group order), in the tensors' dtype."""
    dtype = tensors[0].dtype
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stacked = torch.stack([t.to(wide) for t in tensors])
    reduce = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "max": lambda s: s.amax(0),
              "min": lambda s: s.amin(0), "product": lambda s: s.prod(0)}[str(op)]
    return reduce(stacked).to(dtype)


def chunk_slices(numel: int, size: int) -> list[tuple[int, int]]:
    """The chunks the README specifies (parent's own copy, never the code under test's)."""
    base, extra = divmod(numel, size)
    starts = [i * base + min(i, extra) for i in range(size + 1)]
    return [(starts[i], starts[i + 1]) for i in range(size)]


# ---- the ring's budget ------------------------------------------------------------------------

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
            other = queues.get(peer) if peer is not None else None
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
