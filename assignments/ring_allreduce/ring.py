"""Ring all-reduce from point-to-point messages: the module you write.

Read assignments/ring_allreduce/README.md first. Only blocking `dist.send` / `dist.recv` are
allowed in `ring_shift`; the other functions may also use `dist.isend`, `dist.irecv` and
`dist.batch_isend_irecv`. Any collective (`dist.all_reduce`, `dist.broadcast`, ...) fails the
test that calls it.

Conventions used by every function below:
- N is the number of ranks in `group` (None: the default group) and p this rank's position in
  it, `dist.get_rank(group)`. The ring sends from position p to position (p + 1) % N.
- `dist.send(..., dst=...)` and `dist.recv(..., src=...)` take GLOBAL ranks even with a
  subgroup: map positions to global ranks with `dist.get_process_group_ranks(group)`.
- A tensor is split into chunks by `chunk_bounds(tensor.numel(), N)` over its row-major
  flattening; chunk p belongs to position p.
- `op` is one of "sum", "avg", "max", "min", "product"; dtypes float16, bfloat16, float32,
  float64, int32, int64.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_shift(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Send `tensor` to the next rank of the ring and return what the previous rank sent.

    Args:
        tensor: any shape and dtype, contiguous or not; every rank of `group` passes the same
            shape and dtype. Not modified.
        group: the process group whose ring is used (None: the default group). The rank at
            position p sends to position (p + 1) % N.

    Returns:
        A new tensor with `tensor`'s shape and dtype holding the predecessor's data (a copy of
        `tensor` when the group has one rank).

    Uses only blocking `dist.send` / `dist.recv`, one of each per rank (none when N == 1), in
    an order that cannot deadlock for any N, odd ones included, even if every send waits until
    its receiver is ready (README §3).
    """
    raise NotImplementedError("ring_shift: see README §3")


def chunk_bounds(numel: int, world_size: int) -> list[tuple[int, int]]:
    """Split `numel` elements into `world_size` contiguous chunks, one per rank.

    Returns `world_size` pairs `(start, end)` (end exclusive) that tile `[0, numel)` in order.
    Sizes differ by at most one; the first `numel % world_size` chunks are the larger ones. For
    example `chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]`.

    Raises:
        ValueError: `numel < 0` or `world_size < 1`.
    """
    raise NotImplementedError("chunk_bounds: see README §4")


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
        `chunk_bounds(tensor.numel(), N)[p]` for this rank's position p.
        It has its own storage of those elements only, not a view into a full-size
        buffer: a reduce-scatter leaves each rank holding 1/N of the data.

    Raises (before sending anything):
        ValueError: unknown `op`.  TypeError: `op="avg"` on a non-floating-point dtype.

    Cost: N-1 messages per rank, all to the ring successor (README §5).
    """
    raise NotImplementedError("ring_reduce_scatter: see README §5")


def ring_all_gather(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Fill every rank's chunk of `tensor` from its owner, in place, and return `tensor`.

    Args:
        tensor: the full-size buffer, any shape, contiguous or not, same shape and dtype on
            every rank. Chunks are `chunk_bounds(tensor.numel(), N)` of its row-major
            flattening; on entry only chunk p (this rank's position) must be valid.
        group: process group (None: the default group).

    Returns:
        `tensor` itself, now holding every rank's chunk.

    Cost: N-1 messages per rank, all to the ring successor (README §5).
    """
    raise NotImplementedError("ring_all_gather: see README §5")


def ring_all_reduce(tensor: torch.Tensor, op: str = "sum",
                    group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Reduce `tensor` over the ranks of `group`, in place, and return `tensor`.

    Args:
        tensor: any shape and dtype listed above, contiguous or not; same shape and dtype on
            every rank. Overwritten with the result on every rank.
        op: "sum", "avg" (sum divided by N, floating-point dtypes only), "max", "min" or
            "product".
        group: process group (None: the default group); a subgroup works the same way with
            positions counted in group ranks.

    Returns:
        `tensor` itself.

    Raises (before sending anything):
        ValueError: unknown `op`.  TypeError: `op="avg"` on a non-floating-point dtype.

    Cost: 2(N-1) messages per rank, all to the ring successor, at most
    2 * ceil(D/N) * (N-1) elements in all for D = tensor.numel() (README §6).
    """
    raise NotImplementedError("ring_all_reduce: see README §6")
