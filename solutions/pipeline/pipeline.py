"""Pipeline parallelism: partitioning, GPipe / 1F1B / interleaved schedules, a stage executor.

Reference solution, written to be read beside assignments/pipeline/README.md. Three parts:

1. `partition` cuts a chain of layers into contiguous stages so the slowest stage is as fast as
   possible (the bottleneck decides the pipeline's throughput).
2. `schedule` lists, for one stage, the order in which it runs the forward and backward passes
   of the micro-batches: GPipe (Huang et al., 2019), 1F1B (PipeDream-Flush, Narayanan et al.,
   2021) and the interleaved 1F1B of Megatron-LM (Narayanan et al., SC'21).
3. `train_step` runs one training step of one stage by following its schedule, passing
   activations forward and gradients backward with point-to-point messages.

Every torch.distributed call of the module sits in the "communication" section below, so the
messages can be counted against the cost model: `_recv` and `_send` are the only two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

_KINDS = ("gpipe", "1f1b", "interleaved")


# ---- 1. partitioning ---------------------------------------------------------------------------

def _stages_needed(costs: Sequence[float], limit: float) -> int:
    """How many contiguous stages a greedy left-to-right cut needs when no stage may cost more
    than `limit` (every single cost is at most `limit`)."""
    stages, current = 1, 0.0
    for cost in costs:
        if current + cost > limit:
            stages, current = stages + 1, 0.0
        current += cost
    return stages


def partition(costs: Sequence[float], num_stages: int) -> list[tuple[int, int]]:
    # Why: the pipeline runs at the pace of its slowest stage, so we minimise the largest stage
    # cost B. Every candidate B is the cost of some contiguous run of layers; the smallest one
    # that a greedy cut can meet with at most `num_stages` stages is the optimum (the greedy cut
    # uses the fewest stages for a given limit). There are O(n^2) candidates: fine for the few
    # dozen layers of a real model.
    n = len(costs)
    if num_stages < 1 or num_stages > n:
        raise ValueError(f"num_stages must be between 1 and len(costs) = {n}, got {num_stages}")
    if any(c < 0 for c in costs):
        raise ValueError("costs must be non-negative")
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    candidates = sorted({prefix[j] - prefix[i] for i in range(n) for j in range(i + 1, n + 1)})
    best = next(b for b in candidates
                if b >= max(costs) and _stages_needed(costs, b) <= num_stages)
    # Ties: among the optimal cuts, each stage in turn takes as many layers as it can while
    # staying within `best` and leaving at least one layer for every stage after it.
    bounds, start = [], 0
    for stage in range(num_stages):
        left = num_stages - stage - 1
        end, total = start, 0.0
        while end < n - left and (end == start or total + costs[end] <= best):
            total += costs[end]
            end += 1
        bounds.append((start, end))
        start = end
    return bounds


# ---- 2. schedules --------------------------------------------------------------------------------

def _check_schedule_args(kind: str, num_stages: int, num_microbatches: int, stage: int,
                         num_virtual: int) -> None:
    if kind not in _KINDS:
        raise ValueError(f"unknown schedule kind {kind!r}; expected one of {_KINDS}")
    if num_stages < 1 or num_microbatches < 1:
        raise ValueError("num_stages and num_microbatches must be at least 1")
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage must be in [0, {num_stages}), got {stage}")
    if kind == "interleaved" and num_virtual < 2:
        raise ValueError(f"'interleaved' needs num_virtual >= 2, got {num_virtual}")
    if kind != "interleaved" and num_virtual != 1:
        raise ValueError(f"{kind!r} has one chunk per stage: num_virtual must be 1, "
                         f"got {num_virtual}")
    if kind == "interleaved" and num_microbatches % num_stages:
        raise ValueError(f"'interleaved' needs num_microbatches ({num_microbatches}) divisible "
                         f"by num_stages ({num_stages})")


def schedule(kind: str, num_stages: int, num_microbatches: int, stage: int,
             num_virtual: int = 1) -> list[tuple]:
    _check_schedule_args(kind, num_stages, num_microbatches, stage, num_virtual)
    p, m = num_stages, num_microbatches
    if kind == "gpipe":
        # All forwards, then all backwards: simple, but every micro-batch's activations are alive
        # at the turn.
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if kind == "1f1b":
        # Warm-up: enough forwards to fill the pipe below this stage (the last stage needs none);
        # then each forward is followed by the oldest backward, so at most p - stage micro-batches
        # are in flight; the cool-down drains the rest.
        warmup = min(p - stage - 1, m)
        actions = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            actions += [("F", warmup + i), ("B", i)]
        return actions + [("B", i) for i in range(m - warmup, m)]
    # Interleaved (Megatron-LM): this rank holds v model chunks; chunk c is virtual stage
    # c * p + stage. Micro-batches go through in groups of p: p forwards on chunk 0, then the
    # same p on chunk 1, ...; backwards visit the chunks in the reverse order.
    v = num_virtual
    total = m * v

    def unit(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k % (p * v)) // p
        return (k // (p * v)) * p + k % p, chunk if forward else v - 1 - chunk

    warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    actions = [("F", *unit(k, True)) for k in range(warmup)]
    for i in range(total - warmup):
        actions += [("F", *unit(warmup + i, True)), ("B", *unit(i, False))]
    return actions + [("B", *unit(k, False)) for k in range(total - warmup, total)]


# ---- 3. communication: the only torch.distributed calls of this module -------------------------

def _recv(shape: Sequence[int], dtype: torch.dtype, src: int) -> torch.Tensor:
    buffer = torch.empty(tuple(shape), dtype=dtype)
    dist.recv(buffer, src=src)
    return buffer


def _send(tensor: torch.Tensor, dst: int, pending: list) -> None:
    # isend, not send: under 1F1B a stage sends an activation and then waits for a gradient
    # while its neighbour sends that gradient before receiving the activation. Two blocking
    # sends would wait for each other forever; a posted send does not.
    pending.append(dist.isend(tensor.detach().contiguous(), dst=dst))


# ---- 4. the stage executor -----------------------------------------------------------------------

def _microbatches(t: torch.Tensor, m: int, what: str) -> list[torch.Tensor]:
    if t.shape[0] % m:
        raise ValueError(f"{what} has {t.shape[0]} rows, not divisible by num_microbatches={m}")
    return list(t.split(t.shape[0] // m))


def train_step(stage_module: nn.Module, optimizer: torch.optim.Optimizer, *, kind: str,
               num_microbatches: int, in_shape: Sequence[int],
               batch: torch.Tensor | None = None, targets: torch.Tensor | None = None,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
               dtype: torch.dtype = torch.float32) -> float | None:
    if kind not in ("gpipe", "1f1b"):
        raise ValueError(f"train_step runs 'gpipe' or '1f1b', got {kind!r}")
    stage, p, m = dist.get_rank(), dist.get_world_size(), num_microbatches
    if m < 1:
        raise ValueError(f"num_microbatches must be at least 1, got {m}")
    first, last = stage == 0, stage == p - 1
    inputs = _microbatches(batch, m, "batch") if first else None
    labels = _microbatches(targets, m, "targets") if last else None

    optimizer.zero_grad()
    # Per micro-batch in flight: the input leaf (to read its gradient) and the output to
    # backpropagate from. Entries are deleted after the backward, which frees the graph.
    inputs_in_flight: dict[int, torch.Tensor] = {}
    outputs_in_flight: dict[int, torch.Tensor] = {}
    pending: list = []
    losses: list[float] = []
    for action, mb in schedule(kind, p, m, stage):
        if action == "F":
            if first:
                x = inputs[mb]
            else:
                # A fresh leaf: autograd stops here, and x.grad is what goes back to stage - 1.
                x = _recv(in_shape, dtype, stage - 1).requires_grad_()
            y = stage_module(x)
            if last:
                # The step's loss is the mean over micro-batches, so each one counts 1/m.
                loss = loss_fn(y, labels[mb])
                losses.append(float(loss.detach()))
                y = loss / m
            else:
                _send(y, stage + 1, pending)
            inputs_in_flight[mb], outputs_in_flight[mb] = x, y
        else:
            x, y = inputs_in_flight.pop(mb), outputs_in_flight.pop(mb)
            if last:
                y.backward()  # gradients accumulate in .grad across micro-batches
            else:
                grad = _recv(y.shape, dtype, stage + 1)
                y.backward(grad)
            if not first:
                _send(x.grad, stage - 1, pending)
    for work in pending:
        work.wait()
    optimizer.step()
    return sum(losses) / m if last else None
