"""Shared pieces of the mixed_precision hidden suite.

Each test module builds its cases in the parent, runs all of them in one rank (a module-scoped
fixture's single launch; every case in its own error scope, `harness.cases.run_cases`) and
judges what comes back against references computed here with plain torch: torch's own casts
for the rounding and the fp8 emulation, `torch.amp.GradScaler` on CPU for the loss scaler, and
a plain fp32 loop for the master weights. The rank gets inputs only.

The scenario runners (`scaler_run`, `master_run`) are written once and run twice: in the rank
with the code under test, and here with the reference (GradScaler, a hand-written master loop).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from grader.compare import assert_close
from harness.cases import case_value, run_cases

TIMEOUT = 120.0
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}
# (mantissa bits, smallest normal exponent, largest finite value) of each format
SPECS = {"bf16": (7, -126, 3.3895313892515355e38), "fp16": (10, -14, 65504.0),
         "e4m3": (3, -6, 448.0), "e5m2": (2, -14, 57344.0)}


def launch_cases(launch: Any, rank_fn: Callable[..., Any], cases: dict[str, Any]) -> dict:
    return launch(rank_fn, world_size=1, args=(cases,), timeout=TIMEOUT).values[0]


def outcome(results: dict, key: str, what: str) -> Any:
    """The case's value; a failed case re-raises here ("not implemented yet: ..." for a stub)."""
    return case_value(results[key], what)


def error_of(results: dict, key: str, what: str) -> dict | None:
    """The case's exception as data ({"type", "message", ...}), None if it returned; a stub
    re-raises as "not implemented"."""
    got = results[key]
    if got.get("ok"):
        return None
    error = got.get("error") or {}
    if error.get("not_implemented"):
        case_value(got, what)
    return error


def said(*, hint: str) -> str:
    """`hint`, marked as text for students (grader/reasons.py keeps hint= strings)."""
    return hint


# -- rounding ---------------------------------------------------------------------------------
def as_float32(bit_patterns: list[int]) -> torch.Tensor:
    """float32 values with the given 32-bit patterns (unsigned ints below 2**32)."""
    signed = [b - 2**32 if b >= 2**31 else b for b in bit_patterns]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def rank_round(ctx: Any, cases: dict[str, tuple[torch.Tensor, str]]) -> dict:
    amp = ctx.impl_module("mixed_precision", "amp")
    return run_cases(ctx, [(key, lambda x=x, fmt=fmt: amp.round_to(x.clone(), fmt))
                           for key, (x, fmt) in cases.items()])


def torch_round(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return x.to(DTYPES[fmt]).to(torch.float32)


def spacing(value: float, fmt: str) -> float:
    """The distance between neighbours of `fmt` around |value| (finite, within range)."""
    mant, emin, _ = SPECS[fmt]
    exponent = max(math.frexp(abs(value))[1] - 1, emin) if value else emin
    return 2.0 ** (exponent - mant)


def round_mistake(x: float, got: float, want: float, fmt: str) -> str:
    """What a wrong rounding of x says about its cause (the first words of the failure)."""
    mant, emin, top = SPECS[fmt]
    if math.isnan(want):
        return "NaN must stay NaN"
    if fmt == "e4m3" and math.isinf(got) and abs(want) == top:
        return ("E4M3 (fn) has no infinities: saturate to ±448 above the largest finite value, "
                "inf included, as torch's cast does")
    if math.isinf(want) and not math.isinf(got):
        return f"{fmt} overflows to ±inf above its largest finite value {top:g} (and keeps inf)"
    if got == 0.0 and want != 0.0 and abs(want) < 2.0 ** emin:
        return ("subnormals flushed to zero: below the smallest normal 2^"
                f"{emin} the spacing stays 2^{emin - mant} (gradual underflow)")
    if not math.isinf(want) and not math.isinf(got) and math.isfinite(x):
        step = spacing(want, fmt)
        low = math.floor(x / step) * step
        if x - low == step / 2 and abs(got) > abs(want):
            return "ties must round to even, not half up (away from zero)"
        if math.copysign(1.0, got) != math.copysign(1.0, want):
            return "the sign is lost (±0 keeps its sign too)"
    return "not the nearest value (ties to even)"


def check_rounding(x: torch.Tensor, got: Any, fmt: str, what: str) -> None:
    """Bit-for-bit against torch's cast (NaN only as NaN); the first line names the cause."""
    want = torch_round(x, fmt)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.float32 or got.shape != x.shape:
        raise AssertionError(f"{what}: expected a float32 tensor of shape {tuple(x.shape)}, got "
                             f"{getattr(got, 'dtype', type(got).__name__)} "
                             f"{tuple(getattr(got, 'shape', ()))}")
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    if bool(same.all()):
        return
    bad = (~same).nonzero().flatten()
    i = int(bad[0])
    cause = round_mistake(float(x[i]), float(got[i]), float(want[i]), fmt)
    raise AssertionError(f"{what}: {cause} (README §3) — {len(bad)} of {x.numel()} values "
                         f"differ, e.g. {float(x[i])!r} -> {float(got[i])!r}, torch's cast "
                         f"gives {float(want[i])!r}")


# -- the loss scaler ---------------------------------------------------------------------------
def scaler_model(init: dict[str, torch.Tensor] | None) -> nn.Sequential:
    """The scaler runs' model, with the given parameter values (None: left as built)."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    if init is None:
        return model
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(init[name])
    return model


def scaler_run(scaler: Any, spec: dict) -> dict[str, Any]:
    """One training run with `scaler` (the code under test, or torch.amp.GradScaler).

    spec: init (parameter values), xs [steps, batch, 4], ys [steps, batch, 2], loss_mult,
    inject (steps whose last parameter's gradient is +inf), explicit_unscale (call unscale_
    and clip before step), two_optimizers (first layer and second layer apart).
    Returns the scale after every update, which optimizers stepped (judged by whether their
    parameters changed), what step() returned, and the final parameters."""
    model = scaler_model(spec["init"])
    params = list(model.parameters())
    groups = [params[:2], params[2:]] if spec["two_optimizers"] else [params]
    optimizers = [torch.optim.SGD(g, lr=0.1, momentum=0.9) for g in groups]
    scales, stepped, returned = [], [], []
    for step in range(len(spec["xs"])):
        for opt in optimizers:
            opt.zero_grad()
        out = model(spec["xs"][step])
        loss = ((out - spec["ys"][step]) ** 2).mean() * spec["loss_mult"]
        if step in spec["inject"]:
            loss = loss + math.inf * params[-1].sum()
        scaler.scale(loss).backward()
        before = [torch.cat([p.detach().flatten() for p in g]).clone() for g in groups]
        step_returns = []
        for opt in optimizers:
            if spec["explicit_unscale"]:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], 1.0)
            step_returns.append(scaler.step(opt))
        scaler.update()
        after = [torch.cat([p.detach().flatten() for p in g]) for g in groups]
        stepped.append([not torch.equal(b, a) for b, a in zip(before, after)])
        returned.append(step_returns)
        scales.append(float(scaler.get_scale()))
    return {"scales": scales, "stepped": stepped, "returned": returned,
            "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def rank_scaler(ctx: Any, cases: dict[str, dict]) -> dict:
    amp = ctx.impl_module("mixed_precision", "amp")

    def run(spec: dict) -> Any:
        if spec.get("probe"):
            return scaler_probe(amp, spec["probe"])
        return scaler_run(amp.DynamicLossScaler(**spec["scaler"]), spec)

    return run_cases(ctx, [(key, lambda spec=spec: run(spec)) for key, spec in cases.items()])


def scaler_probe(amp: Any, name: str) -> Any:
    """Small checks of the scaler's API (README §5), each returning plain data."""
    if name == "defaults":
        s = amp.DynamicLossScaler()
        return [s.get_scale(), s.growth_factor, s.backoff_factor, s.growth_interval]
    if name == "scale":
        s = amp.DynamicLossScaler(init_scale=1001.0)  # not a power of two: no bf16 value
        w = torch.tensor([1.5, -2.0], requires_grad=True)
        scaled = s.scale((w * w).sum())
        scaled.backward()
        return [scaled.detach(), w.grad]
    if name == "update_alone":
        s = amp.DynamicLossScaler(init_scale=8.0, growth_interval=1)
        s.update()
        s.update()
        return s.get_scale()
    if name == "unscale_by_3":
        s = amp.DynamicLossScaler(init_scale=3.0)
        w = nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([w], lr=0.1)
        w.grad = torch.tensor([1.0, 2.0, 5.0, 7.0])
        s.unscale_(opt)
        return w.grad.clone()
    if name == "second_unscale":
        s = amp.DynamicLossScaler(init_scale=4.0)
        w = nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.1)
        s.scale(w.sum()).backward()
        s.unscale_(opt)
        try:
            s.unscale_(opt)
        except RuntimeError:
            return ["raised", w.grad.clone()]
        return ["returned", w.grad.clone()]
    if name == "bad_args":
        raised = []
        for kwargs in ({"init_scale": 0.0}, {"growth_factor": 1.0}, {"backoff_factor": 1.0},
                       {"backoff_factor": 0.0}, {"growth_interval": 0}, {"init_scale": 0.5}):
            try:
                amp.DynamicLossScaler(**kwargs)
                raised.append(False)
            except ValueError:
                raised.append(True)
        return raised
    raise KeyError(name)


def scaler_reference(spec: dict) -> dict[str, Any]:
    """The same run with torch.amp.GradScaler on CPU (its step() returns None or the optimizer's
    return: only the parameters say whether it stepped)."""
    return scaler_run(torch.amp.GradScaler("cpu", **spec["scaler"]), spec)


# -- master weights ------------------------------------------------------------------------------
def master_run(make: Callable[..., Any], spec: dict) -> dict[str, Any]:
    """bf16 elementwise model w * x + b trained `steps` times; `make(params, make_optimizer)`
    builds the master-weight optimizer (the code under test, or `ReferenceMaster`)."""
    w = nn.Parameter(spec["w"].to(torch.bfloat16))
    b = nn.Parameter(spec["b"].to(torch.bfloat16))
    lr, kind, wd = spec["lr"], spec["optimizer"], spec["weight_decay"]

    def make_optimizer(ps: list[torch.Tensor]) -> torch.optim.Optimizer:
        if kind == "sgd":
            return torch.optim.SGD(ps, lr=lr, weight_decay=wd)
        return torch.optim.AdamW(ps, lr=lr, weight_decay=wd)

    opt = make([w, b], make_optimizer)
    initial = [m.detach().clone() for m in opt.master_params]
    for step in range(spec["steps"]):
        opt.zero_grad()
        x, y = spec["xs"][step].to(torch.bfloat16), spec["ys"][step].to(torch.bfloat16)
        pred = w * x + (b if spec["use_b"] else 0.0)
        loss = ((pred - y) ** 2).mean() if spec["loss"] == "mse" else (w * x).sum()
        loss.backward()
        opt.step()
    grads = [None if m.grad is None else m.grad.detach().clone() for m in opt.master_params]
    return {"w": w.detach().clone(), "b": b.detach().clone(),
            "master": [m.detach().clone() for m in opt.master_params],
            "master_dtypes": [str(m.dtype) for m in opt.master_params],
            "requires_grad": [bool(m.requires_grad) for m in opt.master_params],
            "grad_dtypes": [None if g is None else str(g.dtype) for g in grads],
            "initial": initial}


class ReferenceMaster:
    """The parent's own master-weight loop (README §6), for `master_run`."""

    def __init__(self, params: list[nn.Parameter], make_optimizer: Callable[..., Any]) -> None:
        self.model_params = params
        self.master_params = [p.detach().float().requires_grad_(True) for p in params]
        self.optimizer = make_optimizer(self.master_params)

    def zero_grad(self) -> None:
        for p in self.model_params + self.master_params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.float()
        self.optimizer.step()
        for p, m in zip(self.model_params, self.master_params):
            p.copy_(m.to(torch.bfloat16))


def rank_master(ctx: Any, cases: dict[str, dict]) -> dict:
    amp = ctx.impl_module("mixed_precision", "amp")

    def run(spec: dict) -> Any:
        if spec.get("probe"):
            return master_probe(amp, spec["probe"])
        return master_run(amp.MasterWeightOptimizer, spec)

    return run_cases(ctx, [(key, lambda spec=spec: run(spec)) for key, spec in cases.items()])


def master_probe(amp: Any, name: str) -> Any:
    if name == "errors":
        out = []
        for params in ([nn.Parameter(torch.ones(2))], []):
            try:
                amp.MasterWeightOptimizer(params, lambda ps: torch.optim.SGD(ps, lr=0.1))
                out.append("none")
            except (TypeError, ValueError) as exc:
                out.append(type(exc).__name__)
        return out
    if name == "zero_grad":
        w = nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
        opt = amp.MasterWeightOptimizer([w], lambda ps: torch.optim.SGD(ps, lr=0.5))
        (w * 2).sum().backward()
        opt.step()
        opt.zero_grad()
        return [w.grad is None, all(m.grad is None for m in opt.master_params), w.detach()]
    raise KeyError(name)


# -- fp8 -----------------------------------------------------------------------------------------
def rank_fp8(ctx: Any, cases: dict[str, dict]) -> dict:
    amp = ctx.impl_module("mixed_precision", "amp")
    return run_cases(ctx, [(key, lambda spec=spec: fp8_run(amp, spec))
                           for key, spec in cases.items()])


def fp8_state(layer: nn.Module) -> dict[str, torch.Tensor]:
    return {f"{t}_{k}": getattr(layer, f"{t}_{k}").detach().clone()
            for t in ("x", "w", "grad") for k in ("amax_history", "scale")}


def fp8_run(amp: Any, spec: dict) -> Any:
    """Calls of one Fp8Linear: forward (and backward with the given output gradient) per call;
    the state after each forward and each backward, outputs and gradients."""
    if spec.get("probe") == "default_history":
        return [list(amp.Fp8Linear(4, 2).x_amax_history.shape),
                list(amp.Fp8Linear(4, 2, history_len=1).grad_amax_history.shape)]
    if spec.get("probe") == "errors":
        out = []
        for make in (lambda: amp.Fp8Linear(4, 2, history_len=0),
                     lambda: amp.Fp8Linear(4, 2)(torch.ones(3, 5)),
                     lambda: amp.Fp8Linear(4, 2)(torch.ones(4))):
            try:
                make()
                out.append("none")
            except ValueError:
                out.append("ValueError")
        return out
    layer = amp.Fp8Linear(spec["in"], spec["out"], bias=spec["bias"] is not None,
                          history_len=spec["h"])
    with torch.no_grad():
        layer.weight.copy_(spec["weight"])
        if spec["bias"] is not None:
            layer.bias.copy_(spec["bias"])
    calls = []
    for x, g in zip(spec["xs"], spec["gs"]):
        x = x.clone().requires_grad_(g is not None)
        if g is None:
            with torch.no_grad():
                y = layer(x)
            calls.append({"y": y.detach().clone(), "fwd": fp8_state(layer)})
            continue
        layer.zero_grad()
        y = layer(x)
        fwd = fp8_state(layer)
        y.backward(g)
        calls.append({"y": y.detach().clone(), "fwd": fwd, "bwd": fp8_state(layer),
                      "dx": x.grad, "dw": layer.weight.grad,
                      "db": None if layer.bias is None else layer.bias.grad})
    return {"calls": calls, "buffers": sorted(name for name, _ in layer.named_buffers())}


def fp8_reference(spec: dict) -> list[dict[str, Any]]:
    """The documented emulation (README §8) with torch's own fp8 casts, in float32."""
    state = {f"{t}_amax_history": torch.zeros(spec["h"]) for t in ("x", "w", "grad")}
    state.update({f"{t}_scale": torch.ones(()) for t in ("x", "w", "grad")})

    def dq(t: torch.Tensor, kind: str, fmt: str, top: float) -> torch.Tensor:
        s = state[f"{kind}_scale"]
        return (t * s).clamp(-top, top).to(DTYPES[fmt]).to(torch.float32) / s

    def record(kind: str, t: torch.Tensor, top: float) -> None:
        hist = state[f"{kind}_amax_history"]
        hist = torch.cat([t.abs().max().reshape(1), hist[:-1]])
        state[f"{kind}_amax_history"] = hist
        m = hist.max()
        if bool(torch.isfinite(m)) and float(m) > 0:
            state[f"{kind}_scale"] = torch.tensor(448.0 if kind != "grad" else 57344.0) / m

    calls = []
    w = spec["weight"]
    for x, g in zip(spec["xs"], spec["gs"]):
        x_dq, w_dq = dq(x, "x", "e4m3", 448.0), dq(w, "w", "e4m3", 448.0)
        record("x", x, 448.0)
        record("w", w, 448.0)
        y = x_dq @ w_dq.t() + (spec["bias"] if spec["bias"] is not None else 0.0)
        call: dict[str, Any] = {"y": y, "fwd": {k: v.clone() for k, v in state.items()}}
        if g is not None:
            g_dq = dq(g, "grad", "e5m2", 57344.0)
            record("grad", g, 57344.0)
            call.update({"dx": g_dq @ w_dq, "dw": g_dq.t() @ x_dq, "db": g.sum(0),
                         "bwd": {k: v.clone() for k, v in state.items()}})
        calls.append(call)
    return calls


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "",
          scale: float = 1.0) -> None:
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}; {hint}")
    assert_close(actual.to(torch.float64), expected.to(torch.float64), what=what, hint=hint,
                 dtype=torch.float32, scale=scale, check_dtype=False, hint_first=True)
