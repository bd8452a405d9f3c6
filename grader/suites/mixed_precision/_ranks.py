"""What travels to the ranks of the mixed_precision hidden suite: one rank function per test
module, and the scenario runners.

The scenario runners (`scaler_run`, `master_run`, `fp8_run`) are written once and run twice:
in the rank with the code under test, and in the parent (`_ref`) with the reference
(GradScaler, a hand-written master loop).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.cases import run_cases


def rank_round(ctx: Any, cases: dict[str, tuple[torch.Tensor, str]]) -> dict:
    amp = ctx.impl_module("mixed_precision", "amp")
    return run_cases(ctx, [(key, lambda x=x, fmt=fmt: amp.round_to(x.clone(), fmt))
                           for key, (x, fmt) in cases.items()])


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
            return ["raised", w.grad.clone()]  # type: ignore[union-attr]
        return ["returned", w.grad.clone()]  # type: ignore[union-attr]
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
