"""MasterWeightOptimizer: bf16 weights trained through fp32 master copies (README §6).

Each run trains the elementwise bf16 model w * x + b (tensors small enough that every
operation is single-threaded, so the parent's own master-weight loop is an exact reference).
The "tiny updates" run shows why the master copy exists: lr * grad is a quarter of half a bf16
ulp of the weights, so updating the bf16 weights in place loses every update, while the master
copy accumulates them and the bf16 weights move.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import tolerance
from grader.seeds import seeded_generator
from grader.suites.mixed_precision._cases import launch_cases, outcome
from grader.suites.mixed_precision._ranks import master_run, rank_master
from grader.suites.mixed_precision._ref import ReferenceMaster, close, said

N = 64


def spec(seed: int, *, steps: int, optimizer: str, lr: float, weight_decay: float = 0.0,
         loss: str = "mse", use_b: bool = True, w: torch.Tensor | None = None) -> dict:
    gen = seeded_generator(seed)
    return {"w": torch.randn(N, generator=gen) if w is None else w,
            "b": torch.randn(N, generator=gen) * 0.1,
            "xs": torch.randn(steps, N, generator=gen) if loss == "mse" else torch.ones(steps, N),
            "ys": torch.randn(steps, N, generator=gen),
            "steps": steps, "optimizer": optimizer, "lr": lr, "weight_decay": weight_decay,
            "loss": loss, "use_b": use_b}


TINY_LR = 2.0**-10  # lr * grad = 2^-10 < 2^-8 = half a bf16 ulp of weights in [1, 2)
RUNS = {
    "tiny-updates": spec(61, steps=64, optimizer="sgd", lr=TINY_LR, loss="sum", use_b=False,
                         w=1.0 + torch.arange(N, dtype=torch.float32) / 128),
    "adamw": spec(62, steps=25, optimizer="adamw", lr=1e-2, weight_decay=0.01),
    "no-grad-param": spec(63, steps=5, optimizer="adamw", lr=1e-2, weight_decay=0.1,
                          use_b=False),
}


@pytest.fixture(scope="module")
def results(launch):
    cases: dict = dict(RUNS)
    cases.update({f"probe-{p}": {"probe": p} for p in ("errors", "zero_grad")})
    return launch_cases(launch, rank_master, cases)


def run_of(results: dict, name: str) -> dict:
    got = outcome(results, name, "MasterWeightOptimizer")
    if not isinstance(got, dict):
        raise AssertionError(f"MasterWeightOptimizer run {name}: returned {got!r:.80}")
    return got


@pytest.mark.points(2)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_master_copies_and_their_gradients_are_fp32(results):
    got = run_of(results, "tiny-updates")  # SGD: it would accept bf16 gradients, AdamW not
    assert got["master_dtypes"] == ["torch.float32"] * 2, (
        f"master_params dtypes {got['master_dtypes']}: the master copies must be float32 "
        f"(README §6)")
    assert got["grad_dtypes"] == ["torch.float32", None], (
        f"master gradients are {got['grad_dtypes']} (b has none): cast the bf16 gradients up to "
        f"float32 (.float()) before the fp32 optimizer steps (README §6)")
    assert got["requires_grad"] == [True, True], (
        f"master_params requires_grad: {got['requires_grad']}; the master copies are leaf "
        f"tensors with requires_grad=True (README §6)")
    got = run_of(results, "adamw")
    spec_ = RUNS["adamw"]
    for i, key in enumerate(("w", "b")):
        close(got["initial"][i], spec_[key].to(torch.bfloat16).float(),
              f"master_params[{i}] at construction",
              said(hint="the master copies start as the bf16 weights' exact values"))


@pytest.mark.points(4)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_tiny_updates_accumulate_in_the_master_copy(results):
    spec_ = RUNS["tiny-updates"]
    got = run_of(results, "tiny-updates")
    w0 = spec_["w"].to(torch.bfloat16)
    # Updating bf16 weights in place: every step rounds back to where it started.
    in_place = w0.clone()
    for _ in range(spec_["steps"]):
        in_place -= torch.tensor(TINY_LR, dtype=torch.bfloat16) * torch.ones_like(in_place)
    assert torch.equal(in_place, w0), "premise: in-place bf16 updates are lost"
    master = w0.float() - spec_["steps"] * TINY_LR  # exact: every update is a power of two
    hint = said(hint=("updates below half a bf16 ulp must accumulate in the fp32 master copy, "
                      "not in the bf16 weights (README §6)"))
    if torch.equal(got["w"], w0):
        raise AssertionError(
            "tiny updates were lost: the bf16 weights did not move in "
            f"{spec_['steps']} steps of lr*grad = 2^-10; {hint}")
    close(got["master"][0], master, "master copy after the tiny updates", hint)
    close(got["w"].float(), master.to(torch.bfloat16).float(), "bf16 weights after the tiny "
          "updates", said(hint="copy the master down rounded to nearest (README §6)"))


@pytest.mark.points(4)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_adamw_equals_the_reference_master_loop(results):
    got = run_of(results, "adamw")
    want = master_run(ReferenceMaster, RUNS["adamw"])
    hint = said(hint=("fp32 grads = bf16 grads cast up, fp32 optimizer step, then the bf16 "
                      "weights = master rounded to bf16 (README §6)"))
    for i, key in enumerate(("w", "b")):
        close(got["master"][i], want["master"][i], f"master copy of {key} after 25 AdamW steps",
              hint)
        close(got[key].float(), want[key].float(), f"bf16 {key} after 25 AdamW steps", hint)


@pytest.mark.points(1)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_adamw_stays_within_bf16_tolerance_of_fp32_training(results):
    got = run_of(results, "adamw")
    spec_ = RUNS["adamw"]
    w = spec_["w"].to(torch.bfloat16).float().requires_grad_(True)
    b = spec_["b"].to(torch.bfloat16).float().requires_grad_(True)
    opt = torch.optim.AdamW([w, b], lr=spec_["lr"], weight_decay=spec_["weight_decay"])
    for step in range(spec_["steps"]):
        opt.zero_grad()
        x = spec_["xs"][step].to(torch.bfloat16).float()
        y = spec_["ys"][step].to(torch.bfloat16).float()
        ((w * x + b - y) ** 2).mean().backward()
        opt.step()
    tol = tolerance(torch.bfloat16)
    for i, (key, ref) in enumerate((("w", w), ("b", b))):
        close(got["master"][i], ref.detach(), f"master {key} against fp32 training",
              said(hint="mixed precision must track fp32 training (README §6)"),
              scale=tol.rtol / tolerance(torch.float32).rtol)


@pytest.mark.points(1)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_parameter_without_gradient_is_left_alone(results):
    got = run_of(results, "no-grad-param")
    b0 = RUNS["no-grad-param"]["b"].to(torch.bfloat16)
    hint = said(hint=("a parameter whose .grad is None gets a None master grad, so the "
                      "optimizer skips it (weight decay included) (README §6)"))
    close(got["b"].float(), b0.float(), "bf16 b (never used, no gradient)", hint)
    close(got["master"][1], b0.float(), "master copy of b (no gradient)", hint)


@pytest.mark.points(1)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_zero_grad_clears_both_sides(results):
    model_none, master_none, w = outcome(results, "probe-zero_grad", "zero_grad")
    assert model_none and master_none, (
        f"after zero_grad(): model grads None: {model_none}, master grads None: {master_none}; "
        f"both must be None (README §6)")
    close(w.float(), torch.zeros(3), "bf16 weights after one SGD step of lr 0.5, grad 2",
          said(hint="the model parameters are updated in place (README §6)"))


@pytest.mark.points(1)
@pytest.mark.exercises("MasterWeightOptimizer")
def test_rejects_fp32_weights_and_no_weights(results):
    got = outcome(results, "probe-errors", "MasterWeightOptimizer")
    assert got == ["TypeError", "ValueError"], (
        f"MasterWeightOptimizer with float32 weights / no weights raised {got}, expected "
        f"[TypeError, ValueError] (README §6)")
