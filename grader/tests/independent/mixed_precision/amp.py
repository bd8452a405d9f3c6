"""Independent implementation of assignments/mixed_precision/amp.py, written from its
docstrings and README only: rounding with exact float64 arithmetic (no bit twiddling), the
scaler as a small state machine, fp8 through a quantise helper and a custom autograd function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

E4M3_MAX = 448.0
E5M2_MAX = 57344.0

_TABLE = {  # fmt: (mantissa bits, min normal exponent, max finite, inf on overflow)
    "bf16": (7, -126, float(2 - 2**-7) * 2.0**127, True),
    "fp16": (10, -14, 65504.0, True),
    "e4m3": (3, -6, 448.0, False),
    "e5m2": (2, -14, 57344.0, True),
}


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    try:
        mbits, emin, top, to_inf = _TABLE[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt}") from None
    if x.dtype is not torch.float32:
        raise TypeError("x must be float32")
    v = x.to(torch.float64)
    a = v.abs()
    finite_nonzero = torch.isfinite(a) & (a > 0)
    safe = torch.where(finite_nonzero, a, torch.ones_like(a))
    _, e = torch.frexp(safe)  # safe = mant * 2**e, mant in [0.5, 1)
    exponent = torch.clamp(e - 1, min=emin)
    quantum = torch.pow(torch.tensor(2.0, dtype=torch.float64), (exponent - mbits).double())
    r = torch.round(safe / quantum) * quantum  # round half to even, all exact in float64
    r = torch.where(finite_nonzero, r, a)
    big = r > top
    r = torch.where(big, torch.full_like(r, float("inf") if to_inf else top), r)
    r = torch.copysign(r, v)
    r = torch.where(torch.isnan(v), v, r)
    return r.to(torch.float32)


class DynamicLossScaler:
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        ok = (init_scale > 0 and growth_factor > 1 and 0 < backoff_factor < 1
              and isinstance(growth_interval, int) and growth_interval >= 1)
        if not ok:
            raise ValueError("bad DynamicLossScaler arguments")
        self._s = float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self._good = 0
        self._seen: list[tuple[Any, bool]] = []

    def get_scale(self) -> float:
        return self._s

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._s

    def _entry(self, optimizer: Any) -> tuple[Any, bool] | None:
        for entry in self._seen:
            if entry[0] is optimizer:
                return entry
        return None

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self._entry(optimizer) is not None:
            raise RuntimeError("unscale_ called twice for one optimizer in one step")
        inv = torch.tensor(1.0 / self._s, dtype=torch.float32)
        bad = False
        grads = [p.grad for g in optimizer.param_groups for p in g["params"]
                 if p.grad is not None]
        for grad in grads:
            bad = bad or not bool(torch.isfinite(grad).all())
            grad.mul_(inv)
        self._seen.append((optimizer, bad))

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self._entry(optimizer) is None:
            self.unscale_(optimizer)
        entry = self._entry(optimizer)
        assert entry is not None
        if entry[1]:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        if not self._seen:
            return
        overflow = any(bad for _, bad in self._seen)
        self._seen = []
        if overflow:
            self._s = self._s * self.backoff_factor
            self._good = 0
            return
        self._good += 1
        if self._good >= self.growth_interval:
            self._s = self._s * self.growth_factor
            self._good = 0


class MasterWeightOptimizer:
    def __init__(self, params: Iterable[nn.Parameter],
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> None:
        self._model = [p for p in params]
        if len(self._model) == 0:
            raise ValueError("no parameters")
        if any(p.dtype != torch.bfloat16 for p in self._model):
            raise TypeError("parameters must be bfloat16")
        self.master_params = [torch.tensor(p.detach().float().tolist(), dtype=torch.float32)
                              .reshape(p.shape).requires_grad_() for p in self._model]
        self.optimizer = make_optimizer(self.master_params)

    def zero_grad(self) -> None:
        for p in self._model:
            p.grad = None
        for m in self.master_params:
            m.grad = None

    def step(self) -> None:
        with torch.no_grad():
            for p, m in zip(self._model, self.master_params):
                m.grad = p.grad.float() if p.grad is not None else None
            self.optimizer.step()
            for p, m in zip(self._model, self.master_params):
                p.copy_(m.to(torch.bfloat16))


def _dq(t: torch.Tensor, scale: torch.Tensor, fmt: str, top: float) -> torch.Tensor:
    return round_to(torch.clamp(t * scale, min=-top, max=top), fmt) / scale


def _push(hist: torch.Tensor, scale: torch.Tensor, value: torch.Tensor, top: float) -> None:
    new = torch.cat([value.reshape(1).to(hist.dtype), hist[:-1]])
    hist.copy_(new)
    m = new.max()
    if torch.isfinite(m) and m > 0:
        scale.fill_((torch.tensor(top, dtype=torch.float32) / m).item())


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, mod: Fp8Linear) -> torch.Tensor:
        xq = _dq(x, mod.x_scale, "e4m3", E4M3_MAX)
        wq = _dq(w, mod.w_scale, "e4m3", E4M3_MAX)
        _push(mod.x_amax_history, mod.x_scale, x.detach().abs().amax(), E4M3_MAX)
        _push(mod.w_amax_history, mod.w_scale, w.detach().abs().amax(), E4M3_MAX)
        ctx.mod = mod
        ctx.save_for_backward(xq, wq)
        return torch.matmul(xq, wq.transpose(0, 1))

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        xq, wq = ctx.saved_tensors
        mod = ctx.mod
        gq = _dq(g, mod.grad_scale, "e5m2", E5M2_MAX)
        _push(mod.grad_amax_history, mod.grad_scale, g.abs().amax(), E5M2_MAX)
        return torch.matmul(gq, wq), torch.matmul(gq.transpose(0, 1), xq), None


class Fp8Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 history_len: int = 16) -> None:
        super().__init__()
        if history_len < 1:
            raise ValueError("history_len must be >= 1")
        ref = nn.Linear(in_features, out_features, bias=bias)
        self.in_features = in_features
        self.weight = ref.weight
        self.bias = ref.bias
        for kind in ("x", "w", "grad"):
            self.register_buffer(kind + "_amax_history", torch.zeros(history_len))
            self.register_buffer(kind + "_scale", torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 2 or x.size(1) != self.in_features:
            raise ValueError("x must be [batch, in_features]")
        y = _Fn.apply(x, self.weight, self)
        if self.bias is not None:
            y = y + self.bias
        return y
