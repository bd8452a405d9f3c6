"""Public tests of mixed_precision (20 points): run `pytest assignments/mixed_precision`.

One rank process imports your amp.py and runs every case below, each in its own error scope,
so a function you have not written yet costs only its own tests. This process computes the
expected values with torch itself: its casts (`x.to(torch.bfloat16)`, `torch.float8_e4m3fn`,
...) for the rounding and the fp8 emulation, and `torch.amp.GradScaler` on CPU for the loss
scaler. The hidden suite checks the same things on harder cases (README §11).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from grader.compare import assert_close
from harness.cases import case_value, run_cases

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}

# -- inputs ---------------------------------------------------------------------------------------
# Exact midpoints between neighbours: 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7.
TIES = {"bf16": [1 + 2**-8, 1 + 3 * 2**-8, -(2 + 2**-7), 3 + 2**-7 * 3],
        "fp16": [1 + 2**-11, 1 + 3 * 2**-11, 2048 + 1, -(2048 + 3)],
        "e4m3": [1.0625, 1.1875, 17.0, -200.0]}
SUBNORMALS = {"fp16": [2**-24, 3.1 * 2**-24, 1023.4 * 2**-24], "e4m3": [2**-9, 2.6 * 2**-9],
              "e5m2": [2**-16, 2.8 * 2**-16, 0.6 * 2**-16]}
OVERFLOW = {"e4m3": [449.0, 600.0, 1e6, math.inf, -math.inf], "e5m2": [61440.0, 1e6, -1e9],
            "fp16": [65520.0, 1e5]}
GROUPS = {"ties": TIES, "subnormals": SUBNORMALS, "overflow": OVERFLOW}


def scaler_spec() -> dict:
    gen = torch.Generator().manual_seed(5)
    return {"w1": torch.randn(3, generator=gen), "w2": torch.randn(3, generator=gen),
            "xs": torch.randn(8, 3, generator=gen), "inject": [1]}


SCALER = scaler_spec()


def run_scaler(scaler: Any, spec: dict, explicit_unscale: bool) -> dict:
    """8 steps of SGD on loss = (w1 . x)^2 + (w2 . x)^2; at the steps in spec["inject"] the last
    parameter's gradient is +inf. Returns the scale after each step, whether each step changed
    the parameters, and the final parameters."""
    w1, w2 = nn.Parameter(spec["w1"].clone()), nn.Parameter(spec["w2"].clone())
    opt = torch.optim.SGD([w1, w2], lr=0.05)
    scales, stepped = [], []
    for step, x in enumerate(spec["xs"]):
        opt.zero_grad()
        loss = (w1 @ x) ** 2 + (w2 @ x) ** 2
        if step in spec["inject"]:
            loss = loss + math.inf * w2.sum()
        scaler.scale(loss).backward()
        before = torch.cat([w1.detach(), w2.detach()])
        if explicit_unscale:
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        stepped.append(not torch.equal(before, torch.cat([w1.detach(), w2.detach()])))
        scales.append(float(scaler.get_scale()))
    return {"scales": scales, "stepped": stepped, "w": torch.cat([w1.detach(), w2.detach()])}


def run_master(amp: Any) -> dict:
    """64 SGD steps with lr * grad = 2^-10, below half a bf16 ulp (2^-8) of weights in [1, 2)."""
    w = nn.Parameter(torch.full((4,), 1.5, dtype=torch.bfloat16))
    opt = amp.MasterWeightOptimizer([w], lambda ps: torch.optim.SGD(ps, lr=2.0**-10))
    for _ in range(64):
        opt.zero_grad()
        w.sum().backward()
        opt.step()
    return {"w": w.detach(), "master": opt.master_params[0].detach()}


FP8_X = [torch.linspace(-2.0, 2.0, 12).reshape(3, 4), torch.linspace(-0.5, 0.7, 12).reshape(3, 4)]
FP8_W = torch.tensor([[0.3, -0.2, 0.1, 0.05], [-0.4, 0.25, 0.6, -0.1]])


def run_fp8(amp: Any) -> list[dict]:
    layer = amp.Fp8Linear(4, 2, bias=False, history_len=4)
    with torch.no_grad():
        layer.weight.copy_(FP8_W)
    calls = []
    for x in FP8_X:
        y = layer(x)
        calls.append({"y": y.detach(), "x_scale": layer.x_scale.clone(),
                      "x_amax_history": layer.x_amax_history.clone(),
                      "w_scale": layer.w_scale.clone()})
    return calls


def rank_cases(ctx: Any) -> dict:
    """Runs in the rank: every case below, each in its own error scope (harness.cases)."""
    amp = ctx.impl_module("mixed_precision", "amp")
    cases: list = []
    for name, group in GROUPS.items():
        for fmt, values in group.items():
            x = torch.tensor(values, dtype=torch.float32)
            cases.append((f"{name}-{fmt}", lambda x=x, fmt=fmt: amp.round_to(x, fmt)))
    cases += [
        ("scaler", lambda: run_scaler(amp.DynamicLossScaler(init_scale=2.0**8,
                                                            growth_interval=3), SCALER, False)),
        ("scaler-unscale", lambda: run_scaler(amp.DynamicLossScaler(init_scale=2.0**8,
                                                                    growth_interval=3),
                                              SCALER, True)),
        ("master", lambda: run_master(amp)),
        ("fp8", lambda: run_fp8(amp)),
    ]
    return run_cases(ctx, cases)


@pytest.fixture(scope="module")
def results(launch):
    return launch(rank_cases, world_size=1, timeout=120.0).values[0]


def check_round(results: dict, name: str, hint: str) -> None:
    for fmt, values in GROUPS[name].items():
        x = torch.tensor(values, dtype=torch.float32)
        got = case_value(results[f"{name}-{fmt}"], "round_to")
        # E4M3 saturates (README §3): clamped first, since torch 2.11's cast gave NaN above 464.
        want = (x.clamp(-448, 448) if fmt == "e4m3" else x).to(DTYPES[fmt]).to(torch.float32)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32, \
            f"round_to(x, {fmt!r}) must return a float32 tensor, got {got!r:.60}"
        for xi, gi, wi in zip(x.tolist(), got.tolist(), want.tolist()):
            assert gi == wi, (f"round_to({xi!r}, {fmt!r}): {hint} — got {gi!r}, torch's cast "
                              f"gives {wi!r} (README §3)")


@pytest.mark.points(3)
@pytest.mark.exercises("round_to")
def test_round_to_ties_go_to_even(results):
    check_round(results, "ties", "ties must round to even (the neighbour whose last kept bit is "
                               "0), not half up")


@pytest.mark.points(2)
@pytest.mark.exercises("round_to")
def test_round_to_keeps_subnormals(results):
    check_round(results, "subnormals", "subnormals flushed to zero? Below the smallest normal "
                                     "the spacing stays that of the smallest binade")


@pytest.mark.points(2)
@pytest.mark.exercises("round_to")
def test_round_to_overflow_saturates_e4m3_only(results):
    check_round(results, "overflow", "E4M3 (fn) has no inf: saturate to ±448; fp16 and E5M2 "
                                   "overflow to ±inf")


def reference_scaler(explicit_unscale: bool) -> dict:
    return run_scaler(torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=3),
                      SCALER, explicit_unscale)


def check_scaler(got: dict, want: dict) -> None:
    init = 2.0**8
    for i in range(len(want["scales"])):
        prev = init if i == 0 else got["scales"][i - 1]
        if got["stepped"][i] and not want["stepped"][i]:
            if got["scales"][i] < prev:
                raise AssertionError(f"step {i} ran although a gradient held inf: skip "
                                     f"optimizer.step() when unscale_ found an inf/NaN "
                                     f"(README §5)")
            raise AssertionError(f"step {i}: the inf in the last parameter's gradient was "
                                 f"missed; check every parameter (not only the first) and back "
                                 f"off (README §5)")
        if got["scales"][i] != want["scales"][i]:
            prev_want = init if i == 0 else want["scales"][i - 1]
            grew = got["scales"][i] > prev and want["scales"][i] == prev_want
            cause = ("the scale grew before growth_interval clean steps" if grew else
                     "the scale is not GradScaler's")
            raise AssertionError(f"{cause}: after step {i} it is {got['scales'][i]:g}, "
                                 f"GradScaler's {want['scales'][i]:g} (README §5)")
        assert got["stepped"][i] == want["stepped"][i], \
            f"step {i} was skipped although its gradients were finite (README §5)"


@pytest.mark.points(4)
@pytest.mark.exercises("DynamicLossScaler")
def test_scaler_backs_off_and_skips_like_gradscaler(results):
    check_scaler(case_value(results["scaler"], "DynamicLossScaler"), reference_scaler(False))


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
def test_scaler_final_weights_equal_gradscalers(results):
    got, want = case_value(results["scaler"], "DynamicLossScaler"), reference_scaler(False)
    assert_close(got["w"], want["w"], what="weights after 8 steps", hint_first=True,
                 hint="unscale once per step, multiplying by the float32 1/scale (README §5)")


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
def test_scaler_unscale_then_step_unscales_once(results):
    got = case_value(results["scaler-unscale"], "DynamicLossScaler")
    want = reference_scaler(True)
    check_scaler(got, want)
    assert_close(got["w"], want["w"], what="weights with unscale_ before step", hint_first=True,
                 hint="unscale applied twice? step() must not unscale again after unscale_")


@pytest.mark.points(3)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_master_weights_keep_tiny_updates(results):
    got = case_value(results["master"], "MasterWeightOptimizer")
    master = torch.full((4,), 1.5 - 64 * 2.0**-10)
    assert not torch.equal(got["w"].float(), torch.full((4,), 1.5)), (
        "tiny updates were lost: the bf16 weights never moved; let the fp32 master copy "
        "accumulate the updates, then copy it down (README §6)")
    assert_close(got["master"], master, what="fp32 master copy after 64 tiny steps",
                 hint="cast the bf16 grads up, step the fp32 optimizer (README §6)")
    assert_close(got["w"].float(), master.to(torch.bfloat16).float(), what="bf16 weights",
                 hint="the weights are the master rounded to bf16 (README §6)")


@pytest.mark.points(2)
@pytest.mark.exercises("Fp8Linear")
def test_fp8_linear_delayed_scaling_first_calls(results):
    got = case_value(results["fp8"], "Fp8Linear")
    x_scale, w_scale = torch.ones(()), torch.ones(())
    history = torch.zeros(4)
    for i, x in enumerate(FP8_X):
        xq = (x * x_scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() / x_scale
        wq = (FP8_W * w_scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() / w_scale
        history = torch.cat([x.abs().max().reshape(1), history[:-1]])
        x_scale = torch.tensor(448.0) / history.max()
        w_scale = torch.tensor(448.0) / FP8_W.abs().max()
        hint = "quantise with the scale from before this call, then record amax (README §8)"
        assert_close(got[i]["y"], xq @ wq.t(), what=f"output of call {i}", hint=hint)
        assert_close(got[i]["x_amax_history"], history, what=f"x_amax_history after call {i}",
                     hint="newest amax at index 0")
        assert_close(got[i]["x_scale"], x_scale, what=f"x_scale after call {i}", hint_first=True,
                     hint="scale from the current amax instead of the history? It is 448 / "
                          "max(x_amax_history) (README §8)")
        assert_close(got[i]["w_scale"], w_scale, what=f"w_scale after call {i}")
