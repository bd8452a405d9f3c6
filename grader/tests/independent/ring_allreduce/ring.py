"""An independent, correct ring_allreduce (not the reference), written from the stub's docstrings.

`selfcheck` grades it and requires every graded test to pass; the attack corpus copies it next
to each adversarial submission as `ring_allreduce/_honest.py`, so a case can be "correct code
plus an attack". It also shows the suites accept an implementation other than the
reference: it batches each step's send and receive instead of ordering them by parity.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_COMBINE = {"sum": torch.add, "avg": torch.add, "max": torch.maximum, "min": torch.minimum,
            "product": torch.mul}


def _ring(group):
    ranks = dist.get_process_group_ranks(group) if group is not None \
        else list(range(dist.get_world_size()))
    position = ranks.index(dist.get_rank())
    size = len(ranks)
    return ranks, position, size, ranks[(position + 1) % size], ranks[(position - 1) % size]


def _check(op, dtype):
    if op not in _COMBINE:
        raise ValueError(f"unknown op {op!r}; use one of {sorted(_COMBINE)}")
    if op == "avg" and not dtype.is_floating_point:
        raise TypeError(f"avg needs a floating dtype, not {dtype}")


def _exchange(outgoing, incoming, successor, predecessor):
    ops = [dist.P2POp(dist.isend, outgoing, successor),
           dist.P2POp(dist.irecv, incoming, predecessor)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def chunk_bounds(numel, world_size):
    if numel < 0 or world_size < 1:
        raise ValueError(f"need numel >= 0 and world_size >= 1, got {numel}, {world_size}")
    base, extra = divmod(numel, world_size)
    bounds, start = [], 0
    for index in range(world_size):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def ring_shift(tensor, group=None):
    _, position, size, successor, predecessor = _ring(group)
    received = torch.empty_like(tensor.contiguous())
    if size == 1:
        return tensor.clone()
    outgoing = tensor.contiguous()
    if position % 2 == 0:
        dist.send(outgoing, dst=successor)
        dist.recv(received, src=predecessor)
    else:
        dist.recv(received, src=predecessor)
        dist.send(outgoing, dst=successor)
    return received


def _reduce_scatter_flat(flat, op, group):
    _, position, size, successor, predecessor = _ring(group)
    bounds = chunk_bounds(flat.numel(), size)
    for step in range(size - 1):
        send_start, send_end = bounds[(position - step - 1) % size]
        recv_start, recv_end = bounds[(position - step - 2) % size]
        incoming = torch.empty(recv_end - recv_start, dtype=flat.dtype)
        _exchange(flat[send_start:send_end].clone(), incoming, successor, predecessor)
        flat[recv_start:recv_end] = _COMBINE[op](flat[recv_start:recv_end], incoming)
    start, end = bounds[position]
    if op == "avg":
        flat[start:end] /= size
    return flat[start:end]


def ring_reduce_scatter(tensor, op="sum", group=None):
    _check(op, tensor.dtype)
    return _reduce_scatter_flat(tensor.reshape(-1).clone(), op, group).clone()


def _all_gather_flat(flat, group):
    _, position, size, successor, predecessor = _ring(group)
    bounds = chunk_bounds(flat.numel(), size)
    for step in range(size - 1):
        send_start, send_end = bounds[(position - step) % size]
        recv_start, recv_end = bounds[(position - step - 1) % size]
        incoming = torch.empty(recv_end - recv_start, dtype=flat.dtype)
        _exchange(flat[send_start:send_end].clone(), incoming, successor, predecessor)
        flat[recv_start:recv_end] = incoming


def ring_all_gather(tensor, group=None):
    flat = tensor.reshape(-1).clone()
    _all_gather_flat(flat, group)
    tensor.copy_(flat.view(tensor.shape))
    return tensor


def ring_all_reduce(tensor, op="sum", group=None):
    _check(op, tensor.dtype)
    flat = tensor.reshape(-1).clone()
    _reduce_scatter_flat(flat, op, group)
    _all_gather_flat(flat, group)
    tensor.copy_(flat.view(tensor.shape))
    return tensor
