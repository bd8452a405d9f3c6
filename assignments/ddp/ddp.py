"""Data parallelism from scratch: a bucketed, overlapped DistributedDataParallel.

Read README.md first (§2-§6). You write `DistributedDataParallel`, a wrapper in the spirit of
`torch.nn.parallel.DistributedDataParallel` (which you may not use), and, as the stretch goal,
`bf16_compress_hook` (README §8).

What every rank of the group does with the wrapper:
  1. at construction, take rank 0's parameters and buffers (broadcast), so that replicas that
     were initialised differently agree;
  2. forward as the wrapped module does;
  3. during backward, copy each gradient into its flat bucket as soon as autograd has
     accumulated it, and launch the bucket's asynchronous all-reduce as soon as the bucket is
     full (overlap: the last layers' gradients travel while the first layers' are computed);
  4. at the end of backward (an autograd-engine callback queued from a hook, never a call the
     user must make), wait on every handle and write the averaged gradients to `.grad`.

Communication contract (README §6): the only `torch.distributed` calls allowed are
`broadcast` (at construction only), `all_reduce` (the buckets) and, in your own code, nothing
else; the grader's transport carries `send`, `recv`, `all_reduce`, `broadcast`, `all_gather`,
`all_gather_into_tensor`, `reduce_scatter`, `reduce_scatter_tensor` and `barrier` only.
Per synchronised backward the hidden suite counts, from a log written outside your process:
exactly one `all_reduce` per bucket, each of that bucket's bytes (the sum of its parameters'
`numel * element_size`; with the bf16 hook, `numel * 2`), and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

# A communication hook: hook(bucket, group) launches the all-reduce of one bucket and returns
# `finish`, a callable that waits for it and returns the averaged bucket (README §8).
CommHook = Callable[[torch.Tensor, Any], Callable[[], torch.Tensor]]


class DistributedDataParallel(nn.Module):
    """Wrap `module` so that every rank of `group` trains one replica of it on its own data.

    After `loss.backward()` on every rank (outside `no_sync()`), each trainable parameter's
    `.grad` holds the average over the group's ranks of that rank's local `.grad` (what plain
    autograd would have accumulated there since the last `zero_grad`), identical on every
    rank. Parameters are never changed except by the construction broadcast.

    Backward (outside `no_sync()`), README §4:
      - each trainable parameter's hook copies its `.grad` into the parameter's slice of its
        bucket's flat buffer;
      - bucket i's all-reduce is launched (`async_op=True`) as soon as every parameter of
        bucket i has its gradient in AND buckets 0..i-1 have been launched (so every rank
        launches the buckets in index order, 0 first); never later than that, and the handle
        is not waited on there;
      - the first hook of a backward queues a callback on the autograd engine
        (`torch.autograd.Variable._execution_engine.queue_callback`) that runs when backward
        ends: it launches the buckets still pending (in index order), waits on every handle,
        and copies each parameter's averaged slice into its `.grad` (same shape and dtype);
      - averaging is the all-reduced SUM divided by the group size (before or after the
        all-reduce, your choice; not `ReduceOp.AVG`, which gloo lacks).
    Unused parameters: a trainable parameter whose hook did not fire in a synchronised
    backward (it did not take part in the loss on this rank) raises, with
    `find_unused_parameters=False`, a `RuntimeError` out of `loss.backward()` whose message
    contains the names of all such parameters (as in `bucket_layout`); the wrapper is not
    used after that error. With `find_unused_parameters=True` such a parameter contributes
    zeros to its bucket, the bucket is launched by the end-of-backward callback, and its
    `.grad` becomes the average (a zero tensor if no rank used it). A backward that reaches
    no trainable parameter at all does nothing. Every rank must run the same number of
    synchronised backward passes.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False,
                 group: dist.ProcessGroup | None = None) -> None:
        """Broadcast rank 0's state, lay out the buckets and register the gradient hooks.

        Args:
            module: the model; kept as `self.module` (the same object, not a copy). Every
                rank passes a module of the same architecture (same parameter names, shapes,
                dtypes, in the same registration order); its values may differ.
            bucket_cap_mb: the bucket capacity in MiB: cap = `bucket_cap_mb * 1024 * 1024`
                bytes (a float, never rounded). See `bucket_layout` for the packing rule.
            find_unused_parameters: False: a trainable parameter that gets no gradient in a
                synchronised backward is an error (below). True: such a parameter
                contributes zeros to the average instead.
            group: the process group (default: the whole world). "Rank 0" means group rank 0.

        Construction, in this order: every parameter (frozen ones too) and every buffer of
        `module`, in `module.parameters()` / `module.buffers()` order, is overwritten in
        place with group rank 0's value (`dist.broadcast`, one call per tensor or flattened,
        your choice; no other collective); then the buckets are laid out and one
        post-accumulate-grad hook (`Tensor.register_post_accumulate_grad_hook`) is registered
        per trainable parameter. Parameters with `requires_grad=False` take no part in the
        buckets or the hooks and their `.grad` is never touched. All trainable parameters
        have the same dtype and device (the tests use float32 and float64 on CPU). A world
        of one works too (no process group needed: then nothing communicates).
        """
        super().__init__()
        raise NotImplementedError("DistributedDataParallel.__init__: see README §6")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """`self.module(*args, **kwargs)`: no communication in forward."""
        raise NotImplementedError("DistributedDataParallel.forward: see README §6")

    @property
    def bucket_layout(self) -> list[list[str]]:
        """The buckets, bucket 0 first, each a list of parameter names in the order packed.

        Names are those of `self.module.named_parameters()` (no "module." prefix). The
        packing rule (README §3): take the trainable parameters in REVERSE registration order
        (reversed `module.named_parameters()`; a parameter shared under two names appears once,
        under its first name), the order in which backward produces their gradients. Walk them
        greedily: a parameter joins the current bucket unless the bucket is non-empty and its
        bytes plus the parameter's (`numel * element_size`) would exceed the cap; then the
        current bucket is closed and the parameter starts the next one. So a parameter larger
        than the cap gets a bucket of its own, and no bucket holding two or more parameters
        exceeds the cap. Frozen parameters appear in no bucket.
        """
        raise NotImplementedError("DistributedDataParallel.bucket_layout: see README §3")

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside this context, backward communicates nothing at all.

        The gradients of backward passes run inside it accumulate locally in `.grad`, exactly
        as plain autograd accumulates them (a sum). The first backward outside the context
        then synchronises the whole accumulated `.grad` (one all-reduce per bucket, as
        always), so `k` micro-batches with the first `k-1` inside `no_sync()` give the same
        `.grad` as one synchronised backward of their summed losses. Unused parameters are not
        checked inside `no_sync()`.
        """
        raise NotImplementedError("DistributedDataParallel.no_sync: see README §5")
        yield  # pragma: no cover

    def register_comm_hook(self, hook: CommHook) -> None:
        """Stretch (README §8): all-reduce every bucket with `hook` from now on.

        Called before the first backward. For each bucket, in the order the buckets are
        launched, the wrapper calls `finish = hook(bucket, group)` with `bucket` the flat
        1-D gradient of that bucket (the parameters' dtype, this rank's local gradients, not
        divided), then at the end of backward `averaged = finish()`, a tensor of the same
        shape and dtype holding the average over the group, whose slices become the `.grad`.
        `group` is the wrapper's process group (None for the default group).
        """
        raise NotImplementedError("DistributedDataParallel.register_comm_hook: see README §8")


def bf16_compress_hook(bucket: torch.Tensor, group: Any = None) -> Callable[[], torch.Tensor]:
    """Stretch (README §8): a communication hook that all-reduces the bucket in bfloat16.

    Launches ONE asynchronous `dist.all_reduce` of a bfloat16 copy of `bucket` (so it moves
    `bucket.numel() * 2` bytes, half of float32) over `group`, and returns `finish()`: wait,
    convert the sum back to `bucket.dtype`, divide by the group size, and return it (a new
    1-D tensor of `bucket`'s shape and dtype; `bucket` itself may be left unchanged). The
    result is the average within bfloat16 rounding (README §9, Tolerances). Dividing before
    the all-reduce instead of after is allowed. In a world of one (a group of one, or no
    process group at all) nothing is communicated and `finish()` returns the bucket itself
    within bfloat16 rounding.
    """
    raise NotImplementedError("bf16_compress_hook: see README §8")
