"""Pipeline parallelism: the module you write.

Read assignments/pipeline/README.md first. Three parts, graded separately:

- `partition` (README §3): cut a chain of layers into contiguous stages.
- `schedule` (README §4): the order of forward and backward passes one stage runs.
- `train_step` (README §5): one training step of one stage, with point-to-point messages.

Conventions:

- p is the number of stages, m the number of micro-batches, s a stage index in [0, p).
- An action is a tuple: `("F", mb)` is the forward pass of micro-batch `mb` on this stage,
  `("B", mb)` its backward pass; with `kind="interleaved"` an action is `("F", mb, chunk)` or
  `("B", mb, chunk)` (README §4.3). Micro-batches are numbered 0 .. m-1.
- Under `train_step`, stage s is the process of global rank s and p is the world size of the
  default process group.
- Nothing here may use a collective (all_reduce, broadcast, barrier, ...): the only
  communication is `dist.isend`/`dist.send` and `dist.recv`/`dist.irecv` between neighbouring
  stages (README §5.2).
- Tensors live on the CPU (the suites run gloo); allocate receive buffers there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

# ---- partitioning (README §3) ------------------------------------------------------------------


def partition(costs: Sequence[float], num_stages: int) -> list[tuple[int, int]]:
    """Cut layers 0 .. n-1 (n = len(costs)) into `num_stages` contiguous, non-empty stages that
    minimise the largest stage cost (a stage's cost is the sum of its layers' costs).

    Args:
        costs: the cost of each layer, non-negative numbers (ints or floats). Sums are compared
            exactly; the tests use integer costs.
        num_stages: p, with 1 <= p <= n.

    Returns:
        A new list of p pairs `(start, end)`: stage s holds layers start .. end-1. The first
        start is 0, each end is the next start, the last end is n, and every stage is non-empty.
        The largest stage cost is the smallest any such cut achieves. Ties (several cuts reach
        that optimum): the earliest stages are as long as possible, i.e. stage 0 takes the most
        layers it can in any optimal cut, then stage 1 the most it can given stage 0, and so
        on. Equivalently, with B the optimum, going left to right each stage takes layers while
        its cost stays <= B and at least one layer remains for every later stage. (So with
        costs [1, 1, 1, 1] and p = 3 the answer is [(0, 2), (2, 3), (3, 4)].)
        Deterministic; `costs` is not modified.

    Raises:
        ValueError: num_stages < 1 or num_stages > len(costs), or a cost is negative.
    """
    raise NotImplementedError("partition: see README §3")


# ---- schedules (README §4) ---------------------------------------------------------------------


def schedule(kind: str, num_stages: int, num_microbatches: int, stage: int,
             num_virtual: int = 1) -> list[tuple]:
    """The ordered list of actions stage `stage` runs in one training step.

    Args:
        kind: "gpipe", "1f1b" or "interleaved" (the last one is the stretch goal, README §4.3).
        num_stages: p >= 1. num_microbatches: m >= 1. stage: s, 0 <= s < p.
        num_virtual: v, the model chunks per stage: 1 for "gpipe" and "1f1b"; >= 2 for
            "interleaved".

    Returns:
        A new list of tuples, exactly:

        - "gpipe": `("F", 0), ("F", 1), ..., ("F", m-1)`, then `("B", 0), ..., ("B", m-1)`.
        - "1f1b": with w = min(p - s - 1, m) warm-up forwards: `("F", 0) .. ("F", w-1)`; then
          for i = 0 .. m-w-1 the pair `("F", w+i), ("B", i)`; then the cool-down
          `("B", m-w) .. ("B", m-1)`. (The last stage has w = 0 and alternates F, B from the
          start.) Every micro-batch appears once as F and once as B, B after its F.
        - "interleaved" (Megatron-LM's interleaved 1F1B): stage s holds chunks c = 0 .. v-1,
          chunk c being virtual stage c*p + s of the p*v-stage model. Actions are
          `("F", mb, c)` and `("B", mb, c)`. Number this stage's m*v forward units k = 0 ..
          m*v-1: unit k is micro-batch (k // (p*v)) * p + k % p on chunk (k % (p*v)) // p.
          Backward unit k is the same micro-batch on chunk v - 1 - (k % (p*v)) // p. With
          w = min(2*(p - s - 1) + (v - 1)*p, m*v) warm-up units: forward units 0 .. w-1; then
          for i = 0 .. m*v-w-1 the pair (forward unit w+i, backward unit i); then backward
          units m*v-w .. m*v-1.

    Raises:
        ValueError: unknown kind; p < 1; m < 1; s outside [0, p); v != 1 for "gpipe"/"1f1b";
            v < 2 for "interleaved"; m not divisible by p for "interleaved".
    """
    raise NotImplementedError("schedule: see README §4")


# ---- the stage executor (README §5) ------------------------------------------------------------


def train_step(stage_module: nn.Module, optimizer: torch.optim.Optimizer, *, kind: str,
               num_microbatches: int, in_shape: Sequence[int],
               batch: torch.Tensor | None = None, targets: torch.Tensor | None = None,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
               dtype: torch.dtype = torch.float32) -> float | None:
    """One training step of this rank's stage (stage s = global rank, p = world size) under the
    schedule `schedule(kind, p, m, s)`, with m = num_microbatches.

    The model is stage 0's module, then stage 1's, ..., stage p-1's; the loss of the step is the
    mean over the m micro-batches of `loss_fn(output of the last stage, targets)`.

    Args:
        stage_module: this stage's layers; called once per micro-batch as `stage_module(x)`.
        optimizer: over `stage_module`'s parameters.
        kind: "gpipe" or "1f1b" (the executor does not run "interleaved").
        num_microbatches: m >= 1. Micro-batch i is rows [i*b, (i+1)*b) of `batch` / `targets`
            along dim 0, with b = rows // m (`torch.split` of dim 0 into m equal parts).
        in_shape: the shape of one micro-batch's activation entering this stage, i.e. of the
            previous stage's output for one micro-batch. Used by stages s > 0 to allocate the
            receive buffer; stage 0 ignores it.
        batch: stage 0 only: the whole batch, [B, ...]; B divisible by m. Ignored elsewhere.
        targets: last stage only: [B, ...]; B divisible by m. Ignored elsewhere.
        loss_fn: last stage only: loss_fn(output_mb, targets_mb) -> scalar tensor.
        dtype: dtype of received activations and gradients (the tests use torch.float64 and
            a float64 module).

    What happens, in this order:
        1. `optimizer.zero_grad()` once (gradients from before the call are discarded).
        2. The actions of the schedule, in order, each one micro-batch:
           F(mb): stage 0 takes micro-batch mb of `batch`; a stage s > 0 receives its input
           from rank s-1 (one message of `in_shape`, `dtype`) and makes it a leaf requiring
           grad. It runs `stage_module` on it. A stage s < p-1 sends the output (detached, one
           message) to rank s+1. The last stage computes loss_fn on its output and the
           micro-batch's targets.
           B(mb): the last stage backpropagates loss_mb / m; a stage s < p-1 receives the
           gradient of its output for mb from rank s+1 (one message of the output's shape and
           `dtype`) and backpropagates it. A stage s > 0 then sends the gradient of its input
           leaf to rank s-1 (one message). Gradients accumulate in the parameters' `.grad`
           over the micro-batches; nothing across ranks goes through autograd. After B(mb)
           the stage holds no reference to mb's autograd graph (its activations are freed).
        3. `optimizer.step()` once, after the last backward. `.grad` is left as accumulated
           (not zeroed after the step).

    Communication (graded from the log of what crossed the wire): only point-to-point calls,
    only to the neighbours s-1 and s+1; per micro-batch exactly one activation message on each
    boundary forward and one gradient message backward. On each rank the messages appear in
    schedule order: for each action, F: receive from s-1 (if s > 0) then send to s+1 (if
    s < p-1); B: receive from s+1 (if s < p-1) then send to s-1 (if s > 0). A send must not
    wait for its receiver: use `dist.isend` and wait for every send's work before returning
    (two blocking `dist.send` calls deadlock under 1F1B, README §5.2). Receives may be blocking
    `dist.recv` (or `dist.irecv` waited at once). With p = 1 there is no communication.

    Memory (graded): under "gpipe" a stage holds the activations of all m micro-batches at
    once; under "1f1b" at most min(m, p - s) micro-batches' activations at any time.

    Returns:
        On the last stage, the step's loss as a Python float: the mean over micro-batches of
        loss_fn's values (computed before the step). None on the other stages.

    Raises:
        ValueError: kind is not "gpipe" or "1f1b"; num_microbatches < 1; on stage 0 the batch's
            rows, on the last stage the targets' rows, not divisible by num_microbatches.
            Raised before any communication.
    """
    raise NotImplementedError("train_step: see README §5")
