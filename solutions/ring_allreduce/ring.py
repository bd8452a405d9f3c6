"""Ring all-reduce from point-to-point messages (reference solution).

The ring of a group of N ranks: position p sends to p+1 and receives from p-1 (mod N). An
all-reduce of D elements is a reduce-scatter (N-1 steps, after which position p holds the fully
reduced chunk p) followed by an all-gather (N-1 steps that pass the finished chunks on). Every
step moves one chunk of about D/N elements per rank, so each rank sends 2(N-1)/N * D elements in
all, whatever N is. See assignments/ring_allreduce/README.md for the derivation.

All torch.distributed calls of this module sit in the first section ("communication"), so they
can be counted against the cost model: `_exchange` is the only place that sends or receives.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

_OPS = ("sum", "avg", "max", "min", "product")


# ---- communication: the only torch.distributed calls of this module --------------------------

@dataclass(frozen=True)
class _Ring:
    """This rank's place in the ring of `group`.

    `position` and `size` count in group ranks; `next_peer` and `prev_peer` are global ranks,
    which is what `dist.send`/`dist.recv` take as `dst`/`src` even when `group` is a subgroup.
    """

    group: dist.ProcessGroup | None
    position: int
    size: int
    next_peer: int
    prev_peer: int


def _ring_of(group: dist.ProcessGroup | None) -> _Ring:
    global_ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    position = dist.get_rank(group)
    if position < 0:
        raise ValueError(f"global rank {dist.get_rank()} is not a member of the group "
                         f"{global_ranks}; only members may call a ring collective on it")
    size = len(global_ranks)
    return _Ring(group, position, size,
                 next_peer=global_ranks[(position + 1) % size],
                 prev_peer=global_ranks[(position - 1) % size])


def _exchange(ring: _Ring, outgoing: torch.Tensor, incoming: torch.Tensor) -> None:
    """Send `outgoing` to the successor and receive the predecessor's message into `incoming`.

    Both are contiguous. A blocking send may wait until its receiver is ready (NCCL always does,
    gloo does too), so if every rank sent first, every rank would wait on its successor: a cycle.
    Even positions send first and odd positions receive first. With an odd ring size the last
    position is even as well, so it and position 0 both start by sending; position 0's send still
    completes because position 1 is receiving, which breaks the cycle.
    """
    if ring.position % 2 == 0:
        dist.send(outgoing, dst=ring.next_peer, group=ring.group)
        dist.recv(incoming, src=ring.prev_peer, group=ring.group)
    else:
        dist.recv(incoming, src=ring.prev_peer, group=ring.group)
        dist.send(outgoing, dst=ring.next_peer, group=ring.group)


# ---- local helpers: no communication below this line except through _exchange ----------------

def _check_op(op: str, dtype: torch.dtype) -> None:
    """Reject a bad `op` before any message is sent, so every rank fails the same way."""
    if op not in _OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {', '.join(_OPS)}")
    if op == "avg" and not dtype.is_floating_point:
        raise TypeError(f"op='avg' needs a floating-point tensor, got {dtype}; "
                        "use op='sum' and divide yourself if you want integer division")


def _combine_(accumulator: torch.Tensor, incoming: torch.Tensor, op: str) -> None:
    """accumulator <- accumulator (op) incoming, in place. `avg` sums here and divides later."""
    if op in ("sum", "avg"):
        accumulator.add_(incoming)
    elif op == "product":
        accumulator.mul_(incoming)
    elif op == "max":
        torch.maximum(accumulator, incoming, out=accumulator)
    else:
        torch.minimum(accumulator, incoming, out=accumulator)


def _as_flat(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`'s elements as a contiguous 1-D tensor in row-major order.

    A view when `tensor` is contiguous (so in-place work lands in `tensor`), else a copy that
    `_write_back` must copy back.
    """
    return tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)


def _write_back(tensor: torch.Tensor, flat: torch.Tensor) -> None:
    if not tensor.is_contiguous():
        tensor.copy_(flat.view(tensor.shape))


def _reduce_scatter_(flat: torch.Tensor, op: str, ring: _Ring,
                     bounds: list[tuple[int, int]]) -> None:
    """Reduce in place so that chunk `ring.position` of `flat` holds the result over all ranks.

    At step s, position p passes on chunk (p - s - 1) and folds its predecessor's partial result
    for chunk (p - s - 2) into its own copy. After N-1 steps chunk p has visited every rank once.
    Other chunks of `flat` are left holding partial results.
    """
    n = ring.size
    largest = max(end - start for start, end in bounds)
    incoming = torch.empty(largest, dtype=flat.dtype, device=flat.device)
    for step in range(n - 1):
        send_start, send_end = bounds[(ring.position - step - 1) % n]
        recv_start, recv_end = bounds[(ring.position - step - 2) % n]
        received = incoming[: recv_end - recv_start]
        _exchange(ring, flat[send_start:send_end], received)
        _combine_(flat[recv_start:recv_end], received, op)
    if op == "avg":
        own_start, own_end = bounds[ring.position]
        flat[own_start:own_end].div_(n)


def _all_gather_(flat: torch.Tensor, ring: _Ring, bounds: list[tuple[int, int]]) -> None:
    """Fill every chunk of `flat` in place, given that chunk `ring.position` is valid.

    At step s, position p passes on chunk (p - s), which it owns (s = 0) or has just received,
    and receives chunk (p - s - 1) straight into place.
    """
    n = ring.size
    for hop in range(n - 1):
        send_start, send_end = bounds[(ring.position - hop) % n]
        recv_start, recv_end = bounds[(ring.position - hop - 1) % n]
        _exchange(ring, flat[send_start:send_end], flat[recv_start:recv_end])


# ---- public API ----------------------------------------------------------------------------

def ring_shift(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Send `tensor` to the next rank of the ring and return what the previous rank sent.

    Args:
        tensor: any shape and dtype, contiguous or not; every rank of `group` passes the same
            shape and dtype. Not modified.
        group: the process group whose ring is used (None: the default group). Positions are
            group ranks; the rank at position p sends to position (p + 1) % N.

    Returns:
        A new contiguous tensor with `tensor`'s shape and dtype holding the predecessor's data
        (a copy of `tensor` when the group has one rank).

    Uses only blocking `dist.send` / `dist.recv`, one of each per rank, ordered so that no
    world size deadlocks (see README §3).
    """
    ring = _ring_of(group)
    if ring.size == 1:
        return tensor.clone(memory_format=torch.contiguous_format)
    received = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    _exchange(ring, tensor.contiguous(), received)
    return received


def chunk_bounds(numel: int, world_size: int) -> list[tuple[int, int]]:
    """Split `numel` elements into `world_size` contiguous chunks, one per rank.

    Returns `world_size` pairs `(start, end)` (end exclusive) that tile `[0, numel)` in order.
    Sizes differ by at most one; the first `numel % world_size` chunks are the larger ones. For
    example `chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]`.

    Raises:
        ValueError: `numel < 0` or `world_size < 1`.
    """
    if numel < 0 or world_size < 1:
        raise ValueError(f"chunk_bounds needs numel >= 0 and world_size >= 1, "
                         f"got numel={numel}, world_size={world_size}")
    base, num_larger = divmod(numel, world_size)
    bounds = []
    start = 0
    for index in range(world_size):
        end = start + base + (1 if index < num_larger else 0)
        bounds.append((start, end))
        start = end
    return bounds


def ring_reduce_scatter(tensor: torch.Tensor, op: str = "sum",
                        group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Reduce `tensor` over the ranks of `group` and return this rank's chunk of the result.

    Args:
        tensor: any shape, contiguous or not, same shape and dtype on every rank; it is treated
            as flattened in row-major order. Not modified.
        op: "sum", "avg", "max", "min" or "product".
        group: process group (None: the default group).

    Returns:
        A new 1-D tensor of `end - start` elements, where `(start, end)` is
        `chunk_bounds(tensor.numel(), N)[p]` for this rank's group rank p.
        It has its own storage of those elements only, not a view into a full-size
        buffer: a reduce-scatter leaves each rank holding 1/N of the data.

    Raises (before sending anything):
        ValueError: unknown `op`.  TypeError: `op="avg"` on a non-floating-point dtype.

    Cost: N-1 messages per rank, all to the ring successor.
    """
    _check_op(op, tensor.dtype)
    ring = _ring_of(group)
    flat = tensor.clone(memory_format=torch.contiguous_format).view(-1)
    bounds = chunk_bounds(flat.numel(), ring.size)
    _reduce_scatter_(flat, op, ring, bounds)
    own_start, own_end = bounds[ring.position]
    return flat[own_start:own_end].clone()


def ring_all_gather(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Fill every rank's chunk of `tensor` from its owner, in place, and return `tensor`.

    Args:
        tensor: the full-size buffer, any shape, contiguous or not, same shape and dtype on
            every rank. Chunks are `chunk_bounds(tensor.numel(), N)` of its row-major
            flattening; on entry only chunk p (p = this rank's group rank) must be valid.
        group: process group (None: the default group).

    Returns:
        `tensor` itself, now holding every rank's chunk.

    Cost: N-1 messages per rank, all to the ring successor.
    """
    ring = _ring_of(group)
    flat = _as_flat(tensor)
    _all_gather_(flat, ring, chunk_bounds(flat.numel(), ring.size))
    _write_back(tensor, flat)
    return tensor


def ring_all_reduce(tensor: torch.Tensor, op: str = "sum",
                    group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Reduce `tensor` over the ranks of `group`, in place, and return `tensor`.

    Args:
        tensor: any shape and dtype listed in the README, contiguous or not; same shape and
            dtype on every rank. Overwritten with the result on every rank.
        op: "sum", "avg" (sum divided by N, floating-point dtypes only), "max", "min" or
            "product".
        group: process group (None: the default group); a subgroup works the same way with
            positions counted in group ranks.

    Returns:
        `tensor` itself.

    Raises (before sending anything):
        ValueError: unknown `op`.  TypeError: `op="avg"` on a non-floating-point dtype.

    Cost: a reduce-scatter then an all-gather, 2(N-1) messages per rank, all to the ring
    successor, at most 2 * ceil(D/N) * (N-1) elements in all for D = tensor.numel().
    """
    _check_op(op, tensor.dtype)
    ring = _ring_of(group)
    flat = _as_flat(tensor)
    bounds = chunk_bounds(flat.numel(), ring.size)
    _reduce_scatter_(flat, op, ring, bounds)
    _all_gather_(flat, ring, bounds)
    _write_back(tensor, flat)
    return tensor
