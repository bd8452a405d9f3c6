"""Reference DistributedDataParallel: buckets in backward order, overlapped all-reduce.

A worked example of README §2-§8. The design is that of PyTorch's DDP (Li et al., "PyTorch
Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020): gradients are
packed into flat buckets in the order backward produces them, each bucket's all-reduce starts
the moment its last gradient lands, and one callback at the end of backward waits for them all.
Every `torch.distributed` call of the wrapper is in `_broadcast_state` (construction) and
`_launch` (the buckets), so they can be counted in two places.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

CommHook = Callable[[torch.Tensor, Any], Callable[[], torch.Tensor]]


def _world(group: Any) -> tuple[int, int]:
    """(rank, size) in `group`; a world of one when no process group exists."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _allreduce_hook(bucket: torch.Tensor, group: Any) -> Callable[[], torch.Tensor]:
    """The default hook: sum the bucket in place asynchronously, divide after the wait."""
    _, size = _world(group)
    if size == 1:
        return lambda: bucket
    handle = dist.all_reduce(bucket, op=dist.ReduceOp.SUM, group=group, async_op=True)

    def finish() -> torch.Tensor:
        handle.wait()
        return bucket.div_(size)

    return finish


class _Bucket:
    """One flat gradient buffer and the parameters whose gradients it holds."""

    def __init__(self, params: list[nn.Parameter], names: list[str]) -> None:
        self.params, self.names = params, names
        self.offsets: list[int] = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        first = params[0]
        self.flat = torch.zeros(total, dtype=first.dtype, device=first.device)
        self.ready: set[int] = set()  # indices into params whose gradient is in
        self.finish: Callable[[], torch.Tensor] | None = None  # set once launched

    def slot(self, i: int) -> torch.Tensor:
        p = self.params[i]
        return self.flat[self.offsets[i]:self.offsets[i] + p.numel()].view_as(p)

    def reset(self) -> None:
        self.ready.clear()
        self.finish = None


class DistributedDataParallel(nn.Module):
    """See the stub (assignments/ddp/ddp.py) for the whole contract."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.module = module
        self.group = group
        self.find_unused_parameters = find_unused_parameters
        self.cap_bytes = bucket_cap_mb * 1024 * 1024
        self._hook: CommHook = _allreduce_hook
        self._sync = True  # False inside no_sync()
        self._callback_queued = False
        self._next_launch = 0  # the lowest bucket index not launched yet in this backward

        # 1. Replicas must start identical: everyone takes group rank 0's values.
        self._broadcast_state()

        # 2. Buckets, in the order backward produces gradients: reverse registration order.
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._buckets = self._pack(list(reversed(named)))
        self._where: dict[int, tuple[int, int]] = {}  # id(param) -> (bucket, index)
        for b, bucket in enumerate(self._buckets):
            for i, p in enumerate(bucket.params):
                self._where[id(p)] = (b, i)

        # 3. One hook per trainable parameter, run after autograd accumulated its .grad.
        for _, p in named:
            p.register_post_accumulate_grad_hook(self._on_grad)

    # -- construction -------------------------------------------------------------------------
    def _broadcast_state(self) -> None:
        _, size = _world(self.group)
        if size == 1:
            return
        src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
        with torch.no_grad():
            for tensor in list(self.module.parameters()) + list(self.module.buffers()):
                dist.broadcast(tensor.data, src=src, group=self.group)

    def _pack(self, named: list[tuple[str, nn.Parameter]]) -> list[_Bucket]:
        """Greedy packing under the cap; a parameter larger than the cap goes alone."""
        buckets: list[_Bucket] = []
        params: list[nn.Parameter] = []
        names: list[str] = []
        used = 0
        for name, p in named:
            size = p.numel() * p.element_size()
            if params and used + size > self.cap_bytes:
                buckets.append(_Bucket(params, names))
                params, names, used = [], [], 0
            params.append(p)
            names.append(name)
            used += size
        if params:
            buckets.append(_Bucket(params, names))
        return buckets

    @property
    def bucket_layout(self) -> list[list[str]]:
        return [list(bucket.names) for bucket in self._buckets]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def register_comm_hook(self, hook: CommHook) -> None:
        self._hook = hook

    # -- backward -------------------------------------------------------------------------------
    def _on_grad(self, param: torch.Tensor) -> None:
        """A gradient landed in `param.grad`: copy it into its bucket; launch what is full."""
        if not self._sync:
            return  # no_sync(): autograd accumulates .grad locally, nothing else happens
        if not self._callback_queued:
            # Runs once, when the whole backward is done (not when this hook returns).
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
            self._callback_queued = True
        b, i = self._where[id(param)]
        bucket = self._buckets[b]
        bucket.slot(i).copy_(param.grad)
        bucket.ready.add(i)
        # Launch in index order only, so every rank issues the same collectives in the same
        # order even when buckets fill in a different order on different ranks.
        while (self._next_launch < len(self._buckets)
               and len(self._buckets[self._next_launch].ready)
               == len(self._buckets[self._next_launch].params)):
            self._launch(self._next_launch)

    def _launch(self, b: int) -> None:
        bucket = self._buckets[b]
        bucket.finish = self._hook(bucket.flat, self.group)
        self._next_launch = b + 1

    def _finalize(self) -> None:
        """End of backward: handle unused parameters, launch the rest, wait, write .grad."""
        self._callback_queued = False
        missing = [bucket.names[i] for bucket in self._buckets
                   for i in range(len(bucket.params)) if i not in bucket.ready]
        if missing and not self.find_unused_parameters:
            for bucket in self._buckets:
                bucket.reset()
            self._next_launch = 0
            raise RuntimeError(
                f"DDP: parameters got no gradient in this backward: {', '.join(missing)}; "
                "use them in the loss, freeze them (requires_grad=False), or construct with "
                "find_unused_parameters=True")
        for bucket in self._buckets:
            for i in range(len(bucket.params)):
                if i not in bucket.ready:
                    bucket.slot(i).zero_()  # an unused parameter contributes zeros
                    bucket.ready.add(i)
        while self._next_launch < len(self._buckets):
            self._launch(self._next_launch)
        for bucket in self._buckets:
            assert bucket.finish is not None
            averaged = bucket.finish()
            for i, p in enumerate(bucket.params):
                piece = averaged[bucket.offsets[i]:bucket.offsets[i] + p.numel()].view_as(p)
                if p.grad is None:
                    p.grad = piece.clone()
                else:
                    p.grad.copy_(piece)
            bucket.reset()
        self._next_launch = 0


def bf16_compress_hook(bucket: torch.Tensor, group: Any = None) -> Callable[[], torch.Tensor]:
    """Halve the bytes: all-reduce a bfloat16 copy, widen and divide after the wait."""
    _, size = _world(group)
    compressed = bucket.to(torch.bfloat16)
    handle = (dist.all_reduce(compressed, op=dist.ReduceOp.SUM, group=group, async_op=True)
              if size > 1 else None)

    def finish() -> torch.Tensor:
        if handle is not None:
            handle.wait()
        return compressed.to(bucket.dtype).div_(size)

    return finish
