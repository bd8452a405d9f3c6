"""An independent DistributedDataParallel (not the reference), written from the stub's docstrings
and README §3-§8 only.

Structure chosen here: one `_Bucket` record per bucket (flat buffer, slot table, a countdown of
gradients still missing) and a per-backward `_Pass` record that is created by the first hook of a
backward and thrown away by the end-of-backward callback, so no "ready" mark can leak from one
step into the next. Division by the group size happens after the wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

CommHook = Callable[[torch.Tensor, Any], Callable[[], torch.Tensor]]


def _group_size(group: Any) -> int:
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


class _Bucket:
    __slots__ = ("index", "names", "params", "offsets", "flat")

    def __init__(self, index: int, entries: list[tuple[str, nn.Parameter]]) -> None:
        self.index = index
        self.names = [name for name, _ in entries]
        self.params = [p for _, p in entries]
        self.offsets = []
        total = 0
        for p in self.params:
            self.offsets.append(total)
            total += p.numel()
        first = self.params[0]
        self.flat = torch.zeros(total, dtype=first.dtype, device=first.device)

    def slot(self, k: int) -> torch.Tensor:
        p = self.params[k]
        return self.flat[self.offsets[k]:self.offsets[k] + p.numel()]


class _Pass:
    """Bookkeeping of one synchronised backward."""

    def __init__(self, buckets: list[_Bucket]) -> None:
        self.missing = [len(b.params) for b in buckets]
        self.seen: set[int] = set()  # id() of parameters whose gradient is in
        self.next_launch = 0
        self.finishers: list[Callable[[], torch.Tensor]] = []


class DistributedDataParallel(nn.Module):
    """Bucketed, overlapped data parallelism (README §2-§6)."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.module = module
        self._group = group
        self._size = _group_size(group)
        self._find_unused = bool(find_unused_parameters)
        self._syncing = True
        self._comm_hook: CommHook | None = None
        self._pass: _Pass | None = None

        if self._size > 1:
            src = 0 if group is None else dist.get_global_rank(group, 0)
            with torch.no_grad():
                for tensor in [*module.parameters(), *module.buffers()]:
                    dist.broadcast(tensor.data, src=src, group=group)

        cap = float(bucket_cap_mb) * 1024 * 1024
        trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        groups: list[list[tuple[str, nn.Parameter]]] = []
        current: list[tuple[str, nn.Parameter]] = []
        used = 0
        for name, p in reversed(trainable):
            nbytes = p.numel() * p.element_size()
            if current and used + nbytes > cap:
                groups.append(current)
                current, used = [], 0
            current.append((name, p))
            used += nbytes
        if current:
            groups.append(current)
        self._buckets = [_Bucket(i, entries) for i, entries in enumerate(groups)]
        self._where: dict[int, tuple[int, int]] = {}
        for b in self._buckets:
            for k, p in enumerate(b.params):
                self._where[id(p)] = (b.index, k)
                p.register_post_accumulate_grad_hook(self._on_grad)

    # -- public API ------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @property
    def bucket_layout(self) -> list[list[str]]:
        return [list(b.names) for b in self._buckets]

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        before = self._syncing
        self._syncing = False
        try:
            yield
        finally:
            self._syncing = before

    def register_comm_hook(self, hook: CommHook) -> None:
        self._comm_hook = hook

    # -- backward machinery ------------------------------------------------------------------------
    def _on_grad(self, param: torch.Tensor) -> None:
        if not self._syncing:
            return
        if self._pass is None:
            self._pass = _Pass(self._buckets)
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        state = self._pass
        b_index, k = self._where[id(param)]
        bucket = self._buckets[b_index]
        with torch.no_grad():
            bucket.slot(k).copy_(param.grad.reshape(-1))
        if id(param) not in state.seen:
            state.seen.add(id(param))
            state.missing[b_index] -= 1
        self._launch_ready(state)

    def _launch_ready(self, state: _Pass) -> None:
        while state.next_launch < len(self._buckets) and state.missing[state.next_launch] == 0:
            self._launch(state, self._buckets[state.next_launch])
            state.next_launch += 1

    def _launch(self, state: _Pass, bucket: _Bucket) -> None:
        flat = bucket.flat
        size = self._size
        if self._comm_hook is not None:
            state.finishers.append(self._comm_hook(flat, self._group))
        elif size == 1:
            state.finishers.append(lambda: flat)
        else:
            work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self._group, async_op=True)

            def finish() -> torch.Tensor:
                work.wait()
                return flat.div_(size)

            state.finishers.append(finish)

    def _end_of_backward(self) -> None:
        state, self._pass = self._pass, None
        if state is None:
            return
        absent = [(b, k) for b in self._buckets for k, p in enumerate(b.params)
                  if id(p) not in state.seen]
        if absent and not self._find_unused:
            names = ", ".join(self._buckets[b.index].names[k] for b, k in absent)
            raise RuntimeError(
                "DistributedDataParallel: these parameters received no gradient in this "
                f"backward (pass find_unused_parameters=True if that is intended): {names}")
        with torch.no_grad():
            for b, k in absent:
                b.slot(k).zero_()
                state.missing[b.index] -= 1
        self._launch_ready(state)
        with torch.no_grad():
            for bucket, finish in zip(self._buckets, state.finishers, strict=True):
                averaged = finish()
                for k, p in enumerate(bucket.params):
                    piece = averaged[bucket.offsets[k]:bucket.offsets[k] + p.numel()].view_as(p)
                    if p.grad is None:
                        p.grad = piece.clone()
                    else:
                        p.grad.copy_(piece)


def bf16_compress_hook(bucket: torch.Tensor, group: Any = None) -> Callable[[], torch.Tensor]:
    """One asynchronous bfloat16 all-reduce of `bucket`; `finish()` gives the float average."""
    size = _group_size(group)
    wire = bucket.to(torch.bfloat16)
    if size == 1:  # a world of one: nothing to communicate, only the bf16 rounding
        return lambda: wire.to(bucket.dtype)
    work = dist.all_reduce(wire, op=dist.ReduceOp.SUM, group=group, async_op=True)

    def finish() -> torch.Tensor:
        work.wait()
        return wire.to(bucket.dtype).div_(size)

    return finish
