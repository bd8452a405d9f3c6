"""What MoELayer sent to the other ranks, counted by the sidecars, not by the communication log.

The log of torch.distributed calls lives inside the rank, where code under test could go around
it (a functional collective, the backend object). Under the sidecar transport every operation
is carried by a process outside the rank, which records the bytes sent to each peer; the rank
has no network, and what it wrote to files is counted by the kernel (`/proc/<pid>/io`). One
forward and backward of a top-1 layer on 4 ranks, 1024 tokens each: the token traffic is rows
that leave the rank (dispatch, and the results of rows that came in) twice over, forward and
backward; an all-gather of every token, or anything else beside the all-to-alls, sends about
twice that.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator

pytestmark = pytest.mark.exercises("MoELayer")

WORLD, TOKENS, HIDDEN, FFN, EXPERTS = 4, 1024, 32, 16, 8
SLACK_BYTES = 64 * 1024  # the count exchange; for files: rendezvous, the result hand-off
SLACK_FRACTION = 0.10  # of the expected volume


def _layer_once(ctx, dense: dict, x: torch.Tensor, grad: torch.Tensor) -> list[int]:
    m = ctx.impl_module("moe", "moe")
    layer = m.MoELayer.from_dense(dense["router"], dense["w_gate"], dense["w_up"],
                                  dense["w_down"], k=1)
    x = x.clone().requires_grad_()
    y, _ = layer(x)
    y.backward(grad)
    return list(y.shape)


def _inputs() -> tuple[dict, list[torch.Tensor], list[torch.Tensor]]:
    gen = seeded_generator(4500)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    dense = {"router": randn(EXPERTS, HIDDEN), "w_gate": randn(EXPERTS, FFN, HIDDEN, scale=0.2),
             "w_up": randn(EXPERTS, FFN, HIDDEN, scale=0.2),
             "w_down": randn(EXPERTS, HIDDEN, FFN, scale=0.2)}
    xs = [randn(TOKENS, HIDDEN) for _ in range(WORLD)]
    grads = [randn(TOKENS, HIDDEN) for _ in range(WORLD)]
    return dense, xs, grads


def _rows_between(dense: dict, xs: list[torch.Tensor]) -> list[list[int]]:
    """rows[src][dst]: tokens of rank src whose expert lives on rank dst (top-1, no capacity)."""
    local = EXPERTS // WORLD
    rows = []
    for x in xs:
        dest = torch.argmax(x @ dense["router"].t(), dim=-1) // local
        rows.append(torch.bincount(dest, minlength=WORLD).tolist())
    return rows


def sent_to_others(wire: list, rank: int) -> int:
    """Bytes the sidecar carried from `rank` to other ranks: each all-to-all's slots but the
    rank's own, and whatever any other operation handed over."""
    total = 0
    for record in wire:
        if record.peer_bytes:
            own = record.group_ranks.index(rank) if rank in record.group_ranks else -1
            total += sum(n for i, n in enumerate(record.peer_bytes) if i != own)
        else:
            total += record.bytes
    return total


@pytest.mark.points(2)
def test_bytes_on_the_wire(launch):
    dense, xs, grads = _inputs()
    result = launch(_layer_once, WORLD, args=(dense,),
                    rank_args=[(x, g) for x, g in zip(xs, grads)], backend="gloo",
                    transport="sidecar", timeout=90)
    rows = _rows_between(dense, xs)
    row_bytes = HIDDEN * 8
    for r in range(WORLD):
        out_rows = sum(rows[r][d] for d in range(WORLD) if d != r)
        in_rows = sum(rows[s][r] for s in range(WORLD) if s != r)
        expected = 2 * (out_rows + in_rows) * row_bytes
        allowed = expected * (1 + SLACK_FRACTION) + SLACK_BYTES
        sent = sent_to_others(result.wire[r], r)
        assert sent <= allowed, (
            f"[rank {r} of {WORLD}] MoELayer sent {sent / 2**10:.0f} KiB to other ranks "
            f"in one forward and backward; the routed rows that leave the rank and the results "
            f"sent back make {expected / 2**10:.0f} KiB (allowed {allowed / 2**10:.0f} KiB): "
            f"move only routed rows, with all_to_all_single, nothing beside it")
        unlogged = result.unlogged_bytes(r)
        assert unlogged is None or unlogged <= SLACK_BYTES + SLACK_FRACTION * expected, (
            f"[rank {r} of {WORLD}] MoELayer wrote {unlogged / 2**10:.0f} KiB to files: "
            f"data must move between ranks with all_to_all_single, never through the disk")
