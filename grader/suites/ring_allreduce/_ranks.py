"""Rank functions of the ring_allreduce hidden suite (they run inside rank processes).

Each takes `ctx` first, imports the code under test with `ctx.impl_module`, and returns plain
data. Inputs come from the parent; expected values are never computed here. Every call under
test is preceded by `ctx.mark(label)` so the parent can cut the communication log per call.

A case is a dict: `call` ("all_reduce", "reduce_scatter", "all_gather", "shift"), `op`,
`group` (tuple of global ranks, or None for the default group), `layout` and `x` (this rank's
input, contiguous, in the case's logical shape; moved to `ctx.device`, so NCCL works too).
Layouts make the input non-contiguous inside the rank: "transposed" is a `.t()` view and
"strided" every other column of a wider buffer.
"""

from __future__ import annotations

from typing import Any

import torch

GAP_FILL = -77  # what the unused columns of a "strided" buffer hold; must survive every call


def _with_layout(x: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(a tensor equal to `x` with the requested memory layout, the gap columns or None)."""
    if layout == "contiguous":
        return x.clone(), None
    if layout == "transposed":
        return x.t().contiguous().t(), None
    if layout == "strided":
        rows, cols = x.shape
        buffer = torch.full((rows, 2 * cols), GAP_FILL, dtype=x.dtype, device=x.device)
        buffer[:, ::2] = x
        return buffer[:, ::2], buffer[:, 1::2]
    raise ValueError(f"unknown layout {layout!r}")


def _call(ring: Any, case: dict[str, Any], tensor: torch.Tensor, group: Any) -> Any:
    call = case["call"]
    if call == "all_reduce":
        return ring.ring_all_reduce(tensor, op=case["op"], group=group)
    if call == "reduce_scatter":
        return ring.ring_reduce_scatter(tensor, op=case["op"], group=group)
    if call == "all_gather":
        return ring.ring_all_gather(tensor, group=group)
    if call == "shift":
        return ring.ring_shift(tensor, group=group)
    raise ValueError(f"unknown call {call!r}")


def rank_cases(ctx, group_list: list[tuple[int, ...]], cases: list[dict[str, Any]]
               ) -> dict[str, dict[str, Any]]:
    """Run every case in its own error scope (`harness.cases.run_cases`), named "case <i>".

    A case's value is None on ranks outside its group, else `out` (what the call returned),
    `returned_input` (whether it returned the very tensor it was given), `after` (the input
    tensor after the call), `out_storage` (the bytes of the storage behind `out`, measured here:
    the trip back copies tensors) and `gaps` (the gap columns of a "strided" layout after the
    call, else None). A case with `meet` False runs at the same time as the next one (disjoint
    groups): the ranks do not wait for each other between the two.
    """
    from harness.cases import RankCase
    from harness.cases import run_cases as run_in_scopes

    ring = ctx.impl_module("ring_allreduce", "ring")
    # new_group is collective over the default group: every rank creates every group, in order.
    groups = {tuple(ranks): ctx.new_group(list(ranks)) for ranks in group_list}

    def one(index: int, case: dict[str, Any]) -> Any:
        members = case["group"]
        if members is not None and ctx.rank not in members:
            return None
        tensor, gaps = _with_layout(case["x"].to(ctx.device), case["layout"])
        ctx.mark(f"case {index}")
        out = _call(ring, case, tensor, groups[tuple(members)] if members else None)
        ctx.mark("done")
        return {
            "out": out if isinstance(out, torch.Tensor) else repr(type(out)),
            "returned_input": out is tensor,
            "out_storage": (out.untyped_storage().nbytes() if isinstance(out, torch.Tensor)
                            else None),
            "after": tensor,
            "gaps": gaps,
        }

    return run_in_scopes(ctx, [
        RankCase(f"case {index}", lambda index=index, case=case: one(index, case),
                 meet=case.get("meet", True))
        for index, case in enumerate(cases)])


def chunk_table(ctx, pairs: list[tuple[int, int]]) -> list[Any]:
    """chunk_bounds(numel, world_size) for each pair, as lists of [start, end]."""
    ring = ctx.impl_module("ring_allreduce", "ring")
    return [[list(b) for b in ring.chunk_bounds(numel, size)] for numel, size in pairs]


def chunk_errors(ctx, pairs: list[tuple[int, int]]) -> list[str]:
    """The exception class name chunk_bounds raises for each (bad) pair, or "no error"."""
    ring = ctx.impl_module("ring_allreduce", "ring")
    names = []
    for numel, size in pairs:
        try:
            ring.chunk_bounds(numel, size)
            names.append("no error")
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the type is the answer
            names.append(type(exc).__name__)
    return names


def op_errors(ctx, calls: list[tuple[str, str, str]]) -> dict[str, dict[str, Any]]:
    """For each (function, op, dtype) call on a small tensor, case "call <i>": the exception
    name or "no error" (a NotImplementedError is the case's own failure: a stub).

    Every rank makes the same calls with the same arguments, so an implementation that raises
    does so on every rank alike and the ranks stay in step.
    """
    from harness.cases import run_cases as run_in_scopes

    ring = ctx.impl_module("ring_allreduce", "ring")

    def one(index: int, function: str, op: str, dtype: str) -> str:
        tensor = torch.arange(6, device=ctx.device).to(getattr(torch, dtype))
        ctx.mark(f"call {index}")
        try:
            getattr(ring, function)(tensor, op=op)
            return "no error"
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the type is the answer
            return type(exc).__name__

    return run_in_scopes(ctx, [(f"call {index}", lambda index=index, call=call: one(index, *call))
                               for index, call in enumerate(calls)])


def repeated_all_reduce(ctx, ops: list[str], inputs: torch.Tensor) -> torch.Tensor:
    """ring_all_reduce on each row of `inputs` ([calls, numel]) in turn; the stacked results."""
    ring = ctx.impl_module("ring_allreduce", "ring")
    outputs = []
    for op, row in zip(ops, inputs):
        tensor = row.to(ctx.device, copy=True)
        ring.ring_all_reduce(tensor, op=op)
        outputs.append(tensor)
    return torch.stack(outputs)


def shift_large(ctx, numel: int) -> torch.Tensor:
    """ring_shift of `numel` float32 values numbered from rank * numel; what arrived."""
    ring = ctx.impl_module("ring_allreduce", "ring")
    start = ctx.rank * numel
    return ring.ring_shift(torch.arange(start, start + numel, dtype=torch.float32,
                                        device=ctx.device))
