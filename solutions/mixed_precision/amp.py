"""Mixed precision from the bits up: rounding, the fp16 loss scaler, fp32 master weights and
fp8 linear layers with delayed scaling (README §1-§9). Reference solution, a worked example."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

# name -> (mantissa bits, smallest normal exponent, largest finite value, saturates on overflow)
_FORMATS: dict[str, tuple[int, int, float, bool]] = {
    "bf16": (7, -126, 3.3895313892515355e38, False),
    "fp16": (10, -14, 65504.0, False),
    "e4m3": (3, -6, 448.0, True),
    "e5m2": (2, -14, 57344.0, False),
}
E4M3_MAX = 448.0
E5M2_MAX = 57344.0


# ---- §3 rounding -------------------------------------------------------------------------------

def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """float32 -> the nearest value of `fmt`, ties to even, held in float32 (contract: stub)."""
    if fmt not in _FORMATS:
        raise ValueError(f"round_to: unknown format {fmt!r}; use one of {sorted(_FORMATS)}")
    if x.dtype != torch.float32:
        raise TypeError(f"round_to: x must be float32, got {x.dtype}")
    mant_bits, emin, max_finite, saturates = _FORMATS[fmt]
    raw = x.contiguous().view(torch.int32).to(torch.int64)
    negative = raw < 0
    bits = raw & 0x7FFFFFFF
    exp_field = bits >> 23
    # The float32 significand with its implicit leading one (absent for float32 subnormals).
    significand = (bits & 0x7FFFFF) | ((exp_field > 0).to(torch.int64) << 23)
    exponent = exp_field.clamp(min=1) - 127
    # Keep `mant_bits` bits after the leading one; below the format's smallest normal exponent
    # the quantum stops shrinking (gradual underflow), so more bits are dropped there.
    drop = (23 - mant_bits + (emin - exponent).clamp(min=0)).clamp(max=25)
    half = torch.ones_like(drop) << (drop - 1)
    is_odd = (significand >> drop) & 1
    # Round to nearest, ties to even: add half minus one, plus one more when the kept part is odd.
    kept = (significand + half - 1 + is_odd) >> drop
    magnitude = torch.ldexp(kept.to(torch.float64),
                            (exponent - 23 + drop).to(torch.float64)).to(torch.float32)
    overflow = magnitude > max_finite
    # E4M3 ("fn": no infinities) saturates at its largest finite value, as torch's cast does;
    # the others overflow to infinity like IEEE formats.
    too_big = torch.tensor(max_finite if saturates else float("inf"), dtype=torch.float32)
    magnitude = torch.where(overflow | (exp_field == 255), too_big, magnitude)
    out = torch.where(negative, -magnitude, magnitude)
    return torch.where(torch.isnan(x), x, out)


# ---- §5 the dynamic loss scaler ------------------------------------------------------------------

class DynamicLossScaler:
    """Loss scaling for fp16 training, with torch.amp.GradScaler's documented rules."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        if init_scale <= 0 or growth_factor <= 1.0 or not 0.0 < backoff_factor < 1.0 \
                or growth_interval < 1:
            raise ValueError("DynamicLossScaler: need init_scale > 0, growth_factor > 1, "
                             "0 < backoff_factor < 1 and growth_interval >= 1")
        self._scale = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self._clean_steps = 0
        # id(optimizer) -> "found an inf/NaN" for the optimizers unscaled since the last update
        self._found_inf: dict[int, bool] = {}

    def get_scale(self) -> float:
        return self._scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        # Multiplying the loss multiplies every gradient by the same factor (chain rule), lifting
        # small fp16 gradients out of the subnormal range.
        return loss * torch.tensor(self._scale, dtype=torch.float32)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) in self._found_inf:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update()")
        inv_scale = torch.tensor(1.0 / self._scale, dtype=torch.float64).to(torch.float32)
        found_inf = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                # Every gradient is checked: an inf in any one of them poisons the step.
                if not bool(torch.isfinite(param.grad).all()):
                    found_inf = True
                param.grad.mul_(inv_scale.to(param.grad.dtype))
        self._found_inf[id(optimizer)] = found_inf

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        # An overflowed step is skipped whole: applying it would write inf/NaN into the weights.
        if self._found_inf[id(optimizer)]:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        if not self._found_inf:
            return
        if any(self._found_inf.values()):
            self._scale *= self.backoff_factor
            self._clean_steps = 0
        else:
            self._clean_steps += 1
            # Grow only after a run of clean steps: probing upwards too often costs skipped steps.
            if self._clean_steps == self.growth_interval:
                self._scale *= self.growth_factor
                self._clean_steps = 0
        self._found_inf = {}


# ---- §6 fp32 master weights ----------------------------------------------------------------------

class MasterWeightOptimizer:
    """bf16 model weights, fp32 master copies and an fp32 optimizer over the copies."""

    def __init__(self, params: Iterable[nn.Parameter],
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> None:
        self.model_params = list(params)
        if not self.model_params:
            raise ValueError("MasterWeightOptimizer: no parameters")
        for param in self.model_params:
            if param.dtype != torch.bfloat16:
                raise TypeError(f"MasterWeightOptimizer: model parameters must be bfloat16, "
                                f"got {param.dtype}")
        # The master copy holds the bits the bf16 weights cannot: small updates accumulate here.
        self.master_params = [p.detach().clone().to(torch.float32).requires_grad_(True)
                              for p in self.model_params]
        self.optimizer = make_optimizer(self.master_params)

    def zero_grad(self) -> None:
        for param in self.model_params + self.master_params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for model, master in zip(self.model_params, self.master_params):
            # Cast the bf16 gradient up before the optimizer squares or accumulates it.
            master.grad = None if model.grad is None else model.grad.to(torch.float32)
        self.optimizer.step()
        for model, master in zip(self.model_params, self.master_params):
            # One rounding per step, fp32 -> bf16 to nearest even.
            model.copy_(master)


# ---- §8 fp8 linear layers with delayed scaling ------------------------------------------------

def _quantize(x: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    """x * scale saturated to the format's range and rounded to it (the fp8 values, in float32)."""
    top = E4M3_MAX if fmt == "e4m3" else E5M2_MAX
    return round_to((x * scale).clamp(-top, top), fmt)


def _record(history: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor,
            fp8_max: float) -> None:
    """Push amax into the history (newest at 0) and set scale = fp8_max / max(history)."""
    history.copy_(torch.roll(history, 1))
    history[0] = amax
    largest = history.max()
    # Transformer Engine's rule: keep the old scale while the history holds no usable amax.
    if bool(torch.isfinite(largest)) and float(largest) > 0.0:
        scale.copy_(torch.tensor(fp8_max, dtype=torch.float32) / largest)


class _Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, layer: Fp8Linear
                ) -> torch.Tensor:
        # Delayed scaling: quantise with the scale the history gave *before* this call, then
        # record this call's amax for the next one (no extra pass over the data).
        x_dq = _quantize(x, layer.x_scale, "e4m3") / layer.x_scale
        w_dq = _quantize(weight, layer.w_scale, "e4m3") / layer.w_scale
        _record(layer.x_amax_history, layer.x_scale, x.abs().max(), E4M3_MAX)
        _record(layer.w_amax_history, layer.w_scale, weight.abs().max(), E4M3_MAX)
        ctx.save_for_backward(x_dq, w_dq)
        ctx.layer = layer
        return x_dq @ w_dq.t()

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        x_dq, w_dq = ctx.saved_tensors
        layer = ctx.layer
        # Gradients need range more than precision: E5M2.
        g_dq = _quantize(grad_out, layer.grad_scale, "e5m2") / layer.grad_scale
        _record(layer.grad_amax_history, layer.grad_scale, grad_out.abs().max(), E5M2_MAX)
        return g_dq @ w_dq, g_dq.t() @ x_dq, None


class Fp8Linear(nn.Module):
    """y = x W^T + b with x and W in E4M3 and the output gradient in E5M2 (emulated)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 history_len: int = 16) -> None:
        super().__init__()
        if history_len < 1:
            raise ValueError("Fp8Linear: history_len must be >= 1")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        for name in ("x", "w", "grad"):
            self.register_buffer(f"{name}_amax_history", torch.zeros(history_len))
            self.register_buffer(f"{name}_scale", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"Fp8Linear: expected x of shape [batch, {self.in_features}], "
                             f"got {tuple(x.shape)}")
        out = _Fp8Matmul.apply(x, self.weight, self)
        # The bias is added in fp32 outside the fp8 matmul; its gradient is the unquantised one.
        return out + self.bias if self.bias is not None else out
