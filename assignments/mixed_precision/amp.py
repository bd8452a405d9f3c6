"""Mixed precision from the bits up: the functions and classes you write (README §10).

- `round_to`: float32 -> bf16, fp16, fp8 E4M3 or E5M2, round to nearest even (README §3).
- `DynamicLossScaler`: the fp16 loss scaler of torch.amp.GradScaler (README §5).
- `MasterWeightOptimizer`: bf16 weights, fp32 master copies and optimizer state (README §6).
- `Fp8Linear`: a linear layer with E4M3 inputs and weights, E5M2 output gradients and delayed
  per-tensor scaling, emulated on float32 (README §8).

The rules of the exercise (the point is to write these yourself; the hidden suite reads this
file's source for them, docstrings and comments aside):
- `round_to` and `Fp8Linear`, and every function, class or module-level name of this file they
  use (your helpers), never name a low-precision dtype: no torch.bfloat16, torch.float16 /
  torch.half or torch.float8_* (not as an attribute, an import or a string), no `.bfloat16()` /
  `.half()`; so no `.to`, `.type`, `.view` or `dtype=` into those dtypes. Bit reinterpretation
  as integers (`x.view(torch.int32)`), float32 / float64 arithmetic and `torch.finfo(...)` are
  fine. `Fp8Linear` quantises with your `round_to`.
- no `GradScaler` anywhere in this file (torch.amp's or torch.cuda.amp's).
`MasterWeightOptimizer` does cast (its model weights are bf16).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

# The formats' largest finite values.
E4M3_MAX = 448.0
E5M2_MAX = 57344.0


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Round every element of `x` to the nearest value representable in `fmt`.

    Args:
        x: float32 tensor of any shape (any float32 bit pattern: normals, subnormals, ±0,
            ±inf, NaN). Not modified.
        fmt: "bf16" (8 exponent bits, 7 mantissa bits), "fp16" (5, 10), "e4m3" (4, 3; the
            "fn" variant: no infinities, largest finite 448) or "e5m2" (5, 2; IEEE-like).

    Returns:
        a new float32 tensor of x's shape, each element exactly the value that
        `x.to(<format's torch dtype>).to(torch.float32)` gives on CPU (bit for bit, the sign of
        zero included; a NaN only has to stay a NaN):
        - round to nearest, ties to even (a tie goes to the neighbour whose last kept mantissa
          bit is 0);
        - gradual underflow: below the format's smallest normal the spacing stays that of the
          smallest binade (subnormals); what rounds below half the smallest subnormal is ±0;
        - overflow: bf16, fp16 and e5m2 give ±inf for every value that rounds above their
          largest finite value (and for ±inf); e4m3 saturates: everything above 448 in
          magnitude, ±inf included, gives ±448;
        - NaN gives NaN.
        Work on the float32 bits or with exact float64 arithmetic; never name the target
        dtype (no cast, `.view` or `dtype=` into bf16 / fp16 / fp8, in here or in the helpers
        this calls; see the module docstring).

    Raises:
        ValueError: `fmt` is not one of the four names.
        TypeError: `x` is not float32.
    """
    raise NotImplementedError("round_to: see README §3")


class DynamicLossScaler:
    """Dynamic loss scaling for fp16 training: torch.amp.GradScaler's documented behaviour,
    written without GradScaler (this file may not name it).

    A training step uses it as GradScaler is used:

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)      # optional, e.g. before clipping gradients
        scaler.step(optimizer)          # unscales first if unscale_ was not called
        scaler.update()

    Attributes `growth_factor`, `backoff_factor` and `growth_interval` hold the constructor's
    arguments. Several optimizers may share one scaler (each unscaled and stepped once per step,
    then one `update()`).
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        """Raises ValueError unless init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1
        and growth_interval >= 1 (an int)."""
        raise NotImplementedError("DynamicLossScaler: see README §5")

    def get_scale(self) -> float:
        """The current scale as a Python float."""
        raise NotImplementedError("DynamicLossScaler.get_scale: see README §5")

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """`loss * scale` (a new tensor in the graph, so backward gives scaled gradients)."""
        raise NotImplementedError("DynamicLossScaler.scale: see README §5")

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide, in place, the `.grad` of every parameter of `optimizer` (all param_groups;
        parameters whose grad is None are skipped) by the current scale, multiplying by the
        float32 reciprocal 1/scale, and record whether any of those gradients held an inf or
        NaN. Records per optimizer, until the next `update()`.

        Raises:
            RuntimeError: unscale_ was already called for this optimizer since the last
                update() (unscaling twice would divide twice).
        """
        raise NotImplementedError("DynamicLossScaler.unscale_: see README §5")

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale `optimizer`'s gradients if `unscale_` was not called for it this step; then
        call `optimizer.step()` unless its gradients held an inf or NaN.

        Returns:
            True when optimizer.step() ran, False when the step was skipped.
        """
        raise NotImplementedError("DynamicLossScaler.step: see README §5")

    def update(self) -> None:
        """End the step and adjust the scale.

        If any optimizer unscaled since the last update found an inf/NaN: scale *=
        backoff_factor and the count of clean steps restarts at 0. Otherwise the count grows by
        one, and when it reaches growth_interval: scale *= growth_factor and the count restarts
        at 0. Then forget the per-optimizer records. An update() with no optimizer unscaled
        since the last one changes nothing.
        """
        raise NotImplementedError("DynamicLossScaler.update: see README §5")


class MasterWeightOptimizer:
    """bf16 model weights trained through fp32 master copies (README §6).

    Args:
        params: the model's parameters, all torch.bfloat16 (else TypeError; none: ValueError).
            The model runs forward and backward in bf16, so their `.grad` is bf16.
        make_optimizer: called once in the constructor with the list of fp32 master tensors
            (leaf tensors, requires_grad=True, in `params`' order) and returns the optimizer
            that updates them, e.g. `lambda ps: torch.optim.AdamW(ps, lr=1e-3)`. Its state is
            therefore fp32 too.

    Attributes:
        master_params: list[torch.Tensor], the fp32 master copies, made in the constructor
            from the bf16 weights' values (exactly: bf16 -> fp32 is exact).
        optimizer: what `make_optimizer` returned.
    """

    def __init__(self, params: Iterable[nn.Parameter],
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> None:
        raise NotImplementedError("MasterWeightOptimizer: see README §6")

    def zero_grad(self) -> None:
        """Set the `.grad` of every model parameter and every master copy to None."""
        raise NotImplementedError("MasterWeightOptimizer.zero_grad: see README §6")

    def step(self) -> None:
        """One update: each master copy's `.grad` becomes its model parameter's bf16 gradient
        cast up to float32 (None where the model parameter has none); `optimizer.step()`; then
        each model parameter gets its master copy's value rounded to bf16 (nearest even), in
        place (same tensor objects, so the model sees it). After step() the master copies'
        `.grad` are those float32 gradients."""
        raise NotImplementedError("MasterWeightOptimizer.step: see README §6")


class Fp8Linear(nn.Module):
    """y = x W^T + b computed with fp8 operands, emulated in float32 (README §8).

    Args:
        in_features, out_features: sizes; bias: whether there is a bias.
        history_len: h, the length of each amax history (>= 1, else ValueError).

    Parameters (float32): `weight` [out_features, in_features], `bias` [out_features] or None
    (initialise as nn.Linear does; tests overwrite them).
    Buffers (float32, registered with register_buffer): for each tensor kind t in
    x (input), w (weight) and grad (output gradient):
        `{t}_amax_history`: [h], zeros at construction; index 0 is the newest entry.
        `{t}_scale`: 0-dim, 1.0 at construction.

    Every forward call (training or eval, with or without grad), for t in (x, w):
        1. quantise with the *current* scale (delayed scaling: it comes from earlier calls):
           q_t = round_to(clamp(t * t_scale, -448, 448), "e4m3"); the matmul uses the
           dequantised values q_t / t_scale (float32): out = (q_x/x_scale) @ (q_w/w_scale)^T;
        2. record: the history shifts by one (the oldest entry drops off the end) and
           history[0] = amax = max|t| of this call;
        3. new scale = 448 / max(history), a float32 division (torch.tensor(448.0) / m in
           float32) — unless max(history) is 0 or not finite: then the scale is kept.
    Then y = out + bias (bias added in float32, unquantised).

    Backward, with g the gradient of `out` [batch, out_features]:
        g is quantised with grad_scale as above but to E5M2 (clamp to ±57344, round_to
        "e5m2"), dequantised g_dq = q_g / grad_scale; grad x = g_dq @ (q_w/w_scale);
        grad W = g_dq^T @ (q_x/x_scale) (the forward's dequantised operands); the bias gets the
        unquantised g summed over the batch. Then grad's history and scale are recorded as in
        steps 2-3 with amax = max|g| and 57344 in place of 448.

    forward(x): x is float32 [batch, in_features] (else ValueError); returns float32
    [batch, out_features]. Scales and histories are state, not parameters: never trained.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 history_len: int = 16) -> None:
        super().__init__()
        raise NotImplementedError("Fp8Linear: see README §8")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("Fp8Linear.forward: see README §8")
