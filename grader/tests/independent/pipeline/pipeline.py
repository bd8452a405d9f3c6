"""An independent pipeline module (not the reference), written from the stub's docstrings and
README §3-§5 only.

Choices made here: the optimal bottleneck comes from a dynamic program over (layers, stages)
rather than a binary search, and the tie rule is then applied by a left-to-right greedy; the
schedules are produced from one generic "warm-up, steady 1F1B pairs, cool-down" builder that the
1F1B and interleaved kinds share; the executor keeps one record per in-flight micro-batch in a
dict and drops it at the micro-batch's backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

# ---- partitioning --------------------------------------------------------------------------------


def _run_cost(costs: Sequence[float], start: int, end: int):
    total = 0
    for c in costs[start:end]:
        total += c
    return total


def partition(costs: Sequence[float], num_stages: int) -> list[tuple[int, int]]:
    values = list(costs)
    n, p = len(values), num_stages
    if p < 1 or p > n:
        raise ValueError(f"num_stages must be in [1, {n}], got {p}")
    for i, c in enumerate(values):
        if c < 0:
            raise ValueError(f"cost of layer {i} is negative: {c}")

    # best[k][i]: the smallest possible largest stage cost of layers 0..i-1 in k stages
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0
    for k in range(1, p + 1):
        for i in range(k, n - (p - k) + 1):
            candidate = inf
            for j in range(k - 1, i):
                if best[k - 1][j] == inf:
                    continue
                here = _run_cost(values, j, i)
                worst = best[k - 1][j] if best[k - 1][j] > here else here
                if worst < candidate:
                    candidate = worst
            best[k][i] = candidate
    limit = best[p][n]

    cuts: list[tuple[int, int]] = []
    start = 0
    for stage in range(p):
        later = p - stage - 1
        end = start + 1  # every stage holds at least one layer
        while end < n - later and _run_cost(values, start, end + 1) <= limit:
            end += 1
        if stage == p - 1:
            end = n
        cuts.append((start, end))
        start = end
    return cuts


# ---- schedules -----------------------------------------------------------------------------------


def _warm_steady_cool(forwards: list[tuple], backwards: list[tuple], warm: int) -> list[tuple]:
    total = len(forwards)
    order = list(forwards[:warm])
    for i in range(total - warm):
        order.append(forwards[warm + i])
        order.append(backwards[i])
    order.extend(backwards[total - warm:])
    return order


def schedule(kind: str, num_stages: int, num_microbatches: int, stage: int,
             num_virtual: int = 1) -> list[tuple]:
    if kind not in ("gpipe", "1f1b", "interleaved"):
        raise ValueError(f"unknown schedule kind {kind!r}: use 'gpipe', '1f1b' or 'interleaved'")
    p, m, s, v = num_stages, num_microbatches, stage, num_virtual
    if p < 1:
        raise ValueError(f"num_stages must be >= 1, got {p}")
    if m < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {m}")
    if not 0 <= s < p:
        raise ValueError(f"stage {s} outside [0, {p})")
    if kind in ("gpipe", "1f1b") and v != 1:
        raise ValueError(f"{kind} takes num_virtual=1, got {v}")
    if kind == "interleaved":
        if v < 2:
            raise ValueError(f"interleaved needs num_virtual >= 2, got {v}")
        if m % p:
            raise ValueError(f"interleaved needs num_microbatches ({m}) divisible by "
                             f"num_stages ({p})")

    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if kind == "1f1b":
        return _warm_steady_cool([("F", i) for i in range(m)], [("B", i) for i in range(m)],
                                 min(p - s - 1, m))
    group = p * v
    forwards, backwards = [], []
    for k in range(m * v):
        mb = (k // group) * p + k % p
        chunk = (k % group) // p
        forwards.append(("F", mb, chunk))
        backwards.append(("B", mb, v - 1 - chunk))
    return _warm_steady_cool(forwards, backwards, min(2 * (p - s - 1) + (v - 1) * p, m * v))


# ---- the stage executor --------------------------------------------------------------------------


def train_step(stage_module: nn.Module, optimizer: torch.optim.Optimizer, *, kind: str,
               num_microbatches: int, in_shape: Sequence[int],
               batch: torch.Tensor | None = None, targets: torch.Tensor | None = None,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
               dtype: torch.dtype = torch.float32) -> float | None:
    if kind not in ("gpipe", "1f1b"):
        raise ValueError(f"train_step runs 'gpipe' or '1f1b', not {kind!r}")
    m = num_microbatches
    if m < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {m}")
    distributed = dist.is_available() and dist.is_initialized()
    p = dist.get_world_size() if distributed else 1
    s = dist.get_rank() if distributed else 0
    first, last = s == 0, s == p - 1
    if first and batch.shape[0] % m:
        raise ValueError(f"batch has {batch.shape[0]} rows, not divisible by {m} micro-batches")
    if last and targets.shape[0] % m:
        raise ValueError(f"targets have {targets.shape[0]} rows, not divisible by {m} "
                         "micro-batches")

    inputs = list(batch.split(batch.shape[0] // m)) if first else None
    labels = list(targets.split(targets.shape[0] // m)) if last else None
    optimizer.zero_grad()

    in_flight: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}
    outgoing: list[tuple[object, torch.Tensor]] = []  # (work, tensor kept alive until waited)
    losses: list[float] = []

    def post(tensor: torch.Tensor, peer: int) -> None:
        outgoing.append((dist.isend(tensor, dst=peer), tensor))

    for action in schedule(kind, p, m, s):
        op, mb = action[0], action[1]
        if op == "F":
            if first:
                x = inputs[mb]
                leaf = None
            else:
                x = torch.empty(tuple(in_shape), dtype=dtype)
                dist.recv(x, src=s - 1)
                x.requires_grad_(True)
                leaf = x
            out = stage_module(x)
            if last:
                loss = loss_fn(out, labels[mb])
                losses.append(float(loss.detach()))
                in_flight[mb] = (leaf, loss)
            else:
                post(out.detach(), s + 1)
                in_flight[mb] = (leaf, out)
            del x, out
        else:
            leaf, head = in_flight.pop(mb)
            if last:
                (head / m).backward()
            else:
                upstream = torch.empty(head.shape, dtype=dtype)
                dist.recv(upstream, src=s + 1)
                head.backward(upstream)
            del head
            if leaf is not None:
                post(leaf.grad, s - 1)
            leaf = None

    for work, _ in outgoing:
        work.wait()
    outgoing.clear()
    optimizer.step()
    return sum(losses) / m if last else None
