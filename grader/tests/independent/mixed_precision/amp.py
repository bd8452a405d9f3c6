"""Mixed precision from the bits up (independent implementation, written from the contract).

- `round_to`: float32 -> bf16 / fp16 / e4m3 / e5m2 by exact float64 arithmetic (frexp, powers of
  two built from their bit patterns, torch.round = half to even).
- `DynamicLossScaler`: GradScaler's rules with a Python-float scale kept on the float32 grid.
- `MasterWeightOptimizer`: bf16 model, fp32 masters.
- `Fp8Linear`: delayed per-tensor scaling through a custom autograd Function.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable

import torch
from torch import nn

# The formats' largest finite values.
E4M3_MAX = 448.0
E5M2_MAX = 57344.0

# name -> (mantissa bits, exponent of the smallest normal, largest finite, saturates?)
_FORMATS: dict[str, tuple[int, int, float, bool]] = {
    "bf16": (7, -126, (2.0 - 2.0**-7) * 2.0**127, False),
    "fp16": (10, -14, 65504.0, False),
    "e4m3": (3, -6, E4M3_MAX, True),
    "e5m2": (2, -14, E5M2_MAX, False),
}


def _exp2_exact(k: torch.Tensor) -> torch.Tensor:
    """2**k as float64 for integer k in float64's normal range, assembled from its bits."""
    return ((k.to(torch.int64) + 1023) << 52).view(torch.float64)


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Round every element of float32 `x` to the nearest value of `fmt`, ties to even; the
    result is float32 with x's shape (see README §3 for the full contract)."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"round_to expects a float32 tensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if not isinstance(fmt, str) or fmt not in _FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(_FORMATS)}")
    mbits, emin, largest, saturates = _FORMATS[fmt]

    wide = x.to(torch.float64)
    finite = torch.isfinite(wide)
    mag = torch.where(finite, wide.abs(), torch.zeros_like(wide))
    # mag = frac * 2**e2 with frac in [0.5, 1): the leading bit sits at 2**(e2 - 1).
    _, e2 = torch.frexp(mag)
    lead = torch.clamp(e2.to(torch.int64) - 1, min=emin)   # subnormals: spacing stops shrinking
    quantum_exp = lead - mbits
    # Multiplying by powers of two is exact in float64 here; torch.round is half to even.
    rounded = torch.round(mag * _exp2_exact(-quantum_exp)) * _exp2_exact(quantum_exp)

    too_big = (rounded > largest) | torch.isinf(wide)
    top = largest if saturates else math.inf
    rounded = torch.where(too_big, torch.full_like(rounded, top), rounded)
    signed = torch.copysign(rounded, wide)                  # keeps -0 and the sign of ±inf
    signed = torch.where(torch.isnan(wide), wide, signed)
    return signed.to(torch.float32)


def _f32(value: float) -> float:
    """The float32 nearest to `value` (round to nearest even), back as a Python float."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


class DynamicLossScaler:
    """Dynamic loss scaling for fp16 training: torch.amp.GradScaler's documented behaviour.

    A training step uses it as GradScaler is used:

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)      # optional, e.g. before clipping gradients
        scaler.step(optimizer)          # unscales first if unscale_ was not called
        scaler.update()
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        def as_real(name: str, v: object) -> float:
            if isinstance(v, bool):
                raise ValueError(f"{name} must be a number, got {v!r}")
            try:
                return float(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a number, got {v!r}") from None

        s, g, b = (as_real("init_scale", init_scale), as_real("growth_factor", growth_factor),
                   as_real("backoff_factor", backoff_factor))
        if not (s > 0 and math.isfinite(s)):
            raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
        if not (g > 1 and math.isfinite(g)):
            raise ValueError(f"growth_factor must be > 1, got {growth_factor!r}")
        if not 0 < b < 1:
            raise ValueError(f"backoff_factor must lie in (0, 1), got {backoff_factor!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) \
                or growth_interval < 1:
            raise ValueError(f"growth_interval must be an int >= 1, got {growth_interval!r}")
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self._scale = _f32(s)            # GradScaler keeps its scale in a float32 tensor
        self._clean_run = 0
        self._overflowed: dict[int, bool] = {}   # id(optimizer) -> found inf/NaN this step

    def get_scale(self) -> float:
        """The current scale as a Python float."""
        return self._scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """`loss * scale` (a new tensor in the graph, so backward gives scaled gradients)."""
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"scale expects a tensor, got {type(loss).__name__}")
        factor = torch.tensor(self._scale, dtype=torch.float32, device=loss.device)
        return loss * factor

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Multiply every gradient of `optimizer` in place by the float32 1/scale and record
        whether any held an inf/NaN. RuntimeError if already done since the last update()."""
        key = id(optimizer)
        if key in self._overflowed:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update()")
        inv = _f32(1.0 / self._scale)
        bad = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad
                    if not bad and not bool(torch.isfinite(grad).all()):
                        bad = True
                    grad.mul_(torch.tensor(inv, dtype=torch.float32, device=grad.device))
        self._overflowed[key] = bad

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale if not yet done for `optimizer`; step it unless its gradients overflowed.
        Returns whether optimizer.step() ran."""
        if id(optimizer) not in self._overflowed:
            self.unscale_(optimizer)
        if self._overflowed[id(optimizer)]:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Back off on any recorded overflow, else count a clean step (grow at the interval)."""
        if not self._overflowed:
            return
        if any(self._overflowed.values()):
            self._scale = _f32(self._scale * self.backoff_factor)
            self._clean_run = 0
        else:
            self._clean_run += 1
            if self._clean_run >= self.growth_interval:
                grown = _f32(self._scale * self.growth_factor)
                if math.isfinite(grown):          # GradScaler never grows the scale to inf
                    self._scale = grown
                self._clean_run = 0
        self._overflowed = {}


class MasterWeightOptimizer:
    """bf16 model weights trained through fp32 master copies (README §6)."""

    def __init__(self, params: Iterable[nn.Parameter],
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> None:
        if isinstance(params, torch.Tensor):
            params = [params]
        model_params = list(params)
        if not model_params:
            raise ValueError("MasterWeightOptimizer needs at least one parameter")
        for p in model_params:
            if not isinstance(p, torch.Tensor) or p.dtype != torch.bfloat16:
                raise TypeError(f"model parameters must be torch.bfloat16 tensors, got "
                                f"{getattr(p, 'dtype', type(p).__name__)}")
        self._model_params = model_params
        self.master_params: list[torch.Tensor] = [
            p.detach().to(torch.float32, copy=True).requires_grad_(True) for p in model_params
        ]
        self.optimizer = make_optimizer(list(self.master_params))

    def zero_grad(self) -> None:
        """Set the `.grad` of every model parameter and every master copy to None."""
        for t in (*self._model_params, *self.master_params):
            t.grad = None

    def step(self) -> None:
        """Cast the bf16 grads up onto the masters, step the fp32 optimizer, round the masters
        down into the bf16 parameters in place."""
        for p, m in zip(self._model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.detach().to(torch.float32, copy=True)
        self.optimizer.step()
        with torch.no_grad():
            for p, m in zip(self._model_params, self.master_params):
                p.copy_(m)          # float32 -> bfloat16 copy rounds to nearest even


def _quantise(t: torch.Tensor, scale: torch.Tensor, fmt: str, limit: float) -> torch.Tensor:
    """Dequantised value of t stored in `fmt` with per-tensor `scale`."""
    return round_to((t * scale).clamp(-limit, limit), fmt) / scale


def _record(history: torch.Tensor, scale: torch.Tensor, t: torch.Tensor, limit: float) -> None:
    """Push max|t| at history[0] (oldest falls off) and recompute scale = limit / max(history),
    keeping the old scale when that maximum is 0 or not finite. All in place."""
    amax = t.detach().abs().amax() if t.numel() else torch.zeros((), device=t.device)
    shifted = torch.cat([amax.reshape(1).to(history.dtype), history[:-1]])
    history.copy_(shifted)
    peak = history.max()
    fresh = torch.tensor(limit, dtype=torch.float32, device=peak.device) / peak
    ok = torch.isfinite(peak) & (peak > 0)
    scale.copy_(torch.where(ok, fresh, scale))


class _Fp8Matmul(torch.autograd.Function):
    """out = Q_e4m3(x) @ Q_e4m3(w)^T with delayed scaling; backward quantises g to E5M2."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, layer: Fp8Linear) -> torch.Tensor:
        x_dq = _quantise(x, layer.x_scale, "e4m3", E4M3_MAX)
        w_dq = _quantise(w, layer.w_scale, "e4m3", E4M3_MAX)
        _record(layer.x_amax_history, layer.x_scale, x, E4M3_MAX)
        _record(layer.w_amax_history, layer.w_scale, w, E4M3_MAX)
        ctx.save_for_backward(x_dq, w_dq)
        ctx.layer = layer
        return x_dq @ w_dq.t()

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x_dq, w_dq = ctx.saved_tensors
        layer: Fp8Linear = ctx.layer
        g_dq = _quantise(g, layer.grad_scale, "e5m2", E5M2_MAX)
        gx = g_dq @ w_dq if ctx.needs_input_grad[0] else None
        gw = g_dq.t() @ x_dq if ctx.needs_input_grad[1] else None
        _record(layer.grad_amax_history, layer.grad_scale, g, E5M2_MAX)
        return gx, gw, None


class Fp8Linear(nn.Module):
    """y = x W^T + b with E4M3 operands, E5M2 output gradients and delayed per-tensor scaling,
    emulated in float32 (README §8)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 history_len: int = 16) -> None:
        super().__init__()
        if isinstance(history_len, bool) or not isinstance(history_len, int) or history_len < 1:
            raise ValueError(f"history_len must be an int >= 1, got {history_len!r}")
        self.in_features = in_features
        self.out_features = out_features
        self.history_len = history_len
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()
        for kind in ("x", "w", "grad"):
            self.register_buffer(f"{kind}_amax_history", torch.zeros(history_len))
            self.register_buffer(f"{kind}_scale", torch.tensor(1.0))

    def reset_parameters(self) -> None:
        # nn.Linear's initialisation.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() != 2 \
                or x.shape[1] != self.in_features:
            raise ValueError(f"Fp8Linear expects float32 [batch, {self.in_features}], got "
                             f"{getattr(x, 'dtype', type(x).__name__)} "
                             f"{tuple(getattr(x, 'shape', ()))}")
        out = _Fp8Matmul.apply(x, self.weight, self)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, history_len={self.history_len}")
