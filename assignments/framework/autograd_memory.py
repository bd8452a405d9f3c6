"""Autograd's memory: what students write in `autograd_memory.py` (README §3).

Every differentiable op may save tensors for its backward; they stay alive until backward
runs. `saved_tensor_bytes` measures them with saved-tensor hooks; `checkpoint` trades that
memory for a second forward (activation recomputation); `swiglu` is a fused activation whose
backward is written by hand, so it saves its two inputs and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.autograd.graph import saved_tensors_hooks  # noqa: F401  (what §3.1 needs)


def saved_tensor_bytes(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> int:
    """Bytes autograd saves for backward while `fn(*inputs)` runs once (README §3.1).

    Run `fn(*inputs)` once inside `saved_tensors_hooks` and return the sum, over the distinct
    storages of the tensors autograd packs during that call, of each storage's size in bytes
    (`t.untyped_storage().nbytes()`): a storage packed twice, or packed through two views,
    counts once; tensors whose storage has 0 bytes count 0. Storages of `inputs` (and of
    parameters `fn` uses) count when autograd saves them, like any other. What `fn` returns
    is dropped. The count depends on shapes and dtypes only, so it is deterministic.
    Inputs that require grad are left as they are (no `.grad` is touched: backward is not run).
    """
    raise NotImplementedError("saved_tensor_bytes: see README §3.1")


def checkpoint(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """`fn(*inputs)` through a `torch.autograd.Function` that saves only `inputs` and
    recomputes `fn` in backward (activation recomputation, README §3.2).

    - `fn` maps tensors to one tensor, is deterministic, and gets gradients only through
      `inputs` (pass parameters as inputs); any input may or may not require grad.
    - Forward: returns a tensor equal to `fn(*inputs)` (same values, shape, dtype), and
      autograd saves nothing for it but `inputs` themselves: `saved_tensor_bytes` of a call is
      at most the total bytes of the inputs' storages, however large `fn`'s intermediates.
    - Backward: runs `fn` again on detached copies of the inputs with grad enabled and returns
      the gradient of each input that requires grad (None for the others, and for an input
      `fn` does not use): equal to what `fn(*inputs).backward(g)` would give, whatever `g`.
    - Does not change `inputs` in place.
    """
    raise NotImplementedError("checkpoint: see README §3.2")


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Fused SwiGLU activation `silu(gate) * up` with a hand-written backward (README §3.3).

    - `gate` and `up` have the same shape and floating dtype; the result too (elementwise,
      `silu(g) = g * sigmoid(g)`), a new tensor; inputs unchanged.
    - Implemented as a `torch.autograd.Function` whose forward saves only `gate` and `up`
      (`saved_tensor_bytes` at most the two inputs' bytes) and whose backward computes
      `d gate = grad * up * s * (1 + gate * (1 - s))` with `s = sigmoid(gate)`, and
      `d up = grad * silu(gate)`, in the inputs' dtype, without autograd inside.
    - Gradients pass `torch.autograd.gradcheck` in float64, for either or both inputs
      requiring grad (None for an input that does not).
    """
    raise NotImplementedError("swiglu: see README §3.3")
