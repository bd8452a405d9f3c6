"""DynamicLossScaler side by side with torch.amp.GradScaler on CPU (README §5).

A small two-layer model trains with SGD + momentum; at chosen steps the last parameter's
gradient is made +inf (an overflow that only the last gradient shows), or the scale itself is
so large that the scaled gradients overflow until it has backed off. The same run with
GradScaler, here in the parent, gives the scale after every step, which steps ran and the final
parameters; the scales are powers of two, so both unscalings are exact and everything must be
equal.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.mixed_precision._cases import launch_cases, outcome
from grader.suites.mixed_precision._ranks import rank_scaler, scaler_model
from grader.suites.mixed_precision._ref import close, said, scaler_reference


def spec(seed: int, steps: int, *, scaler: dict, inject: tuple[int, ...] = (),
         loss_mult: float = 1.0, explicit_unscale: bool = False,
         two_optimizers: bool = False) -> dict:
    gen = seeded_generator(seed)
    shapes = {name: p.shape for name, p in scaler_model(None).named_parameters()}
    init = {name: torch.randn(shape, generator=gen) * 0.5 for name, shape in shapes.items()}
    return {"scaler": scaler, "init": init, "inject": list(inject), "loss_mult": loss_mult,
            "xs": torch.randn(steps, 8, 4, generator=gen),
            "ys": torch.randn(steps, 8, 2, generator=gen),
            "explicit_unscale": explicit_unscale, "two_optimizers": two_optimizers}


SCENARIOS = {
    # inf in the last gradient at steps 2, 7 and 8; grows after 3 clean steps
    "injected": spec(51, 14, scaler={"init_scale": 2.0**10, "growth_interval": 3},
                     inject=(2, 7, 8)),
    # the scale starts so large that the scaled gradients overflow float32 until it backs off,
    # then it grows every 2 clean steps and overflows again
    "overflowing": spec(52, 16, scaler={"init_scale": 2.0**127, "growth_interval": 2},
                        loss_mult=8.0),
    # unscale_ then clip_grad_norm_ before step (step must not unscale again)
    "explicit-unscale": spec(53, 9, scaler={"init_scale": 2.0**8, "growth_interval": 2},
                             inject=(3,), explicit_unscale=True),
    # two optimizers: only the second one's gradients overflow at steps 1 and 4
    "two-optimizers": spec(54, 7, scaler={"init_scale": 2.0**6, "growth_interval": 2,
                                          "growth_factor": 4.0, "backoff_factor": 0.25},
                           inject=(1, 4), two_optimizers=True),
}
PROBES = ("defaults", "scale", "update_alone", "second_unscale", "unscale_by_3", "bad_args")


@pytest.fixture(scope="module")
def results(launch):
    cases: dict = dict(SCENARIOS)
    cases.update({f"probe-{p}": {"probe": p} for p in PROBES})
    return launch_cases(launch, rank_scaler, cases)


_references: dict[str, dict] = {}


def reference(name: str) -> dict:
    if name not in _references:
        _references[name] = scaler_reference(SCENARIOS[name])
    return _references[name]


def run_of(results: dict, name: str) -> dict:
    got = outcome(results, name, "DynamicLossScaler")
    if not isinstance(got, dict):
        raise AssertionError(f"DynamicLossScaler run {name}: returned {got!r:.80}")
    return got


def check_scales(name: str, got: dict, want: dict) -> None:
    """The scale after every step; the first step where the run leaves GradScaler's names the
    cause (a missed inf, a step that was not skipped, growth too early or too late)."""
    init = SCENARIOS[name]["scaler"]["init_scale"]
    for i, (g, w) in enumerate(zip(got["scales"], want["scales"])):
        prev_g = init if i == 0 else got["scales"][i - 1]
        prev_w = init if i == 0 else want["scales"][i - 1]
        ran_anyway = any(gk and not wk for gk, wk in zip(got["stepped"][i], want["stepped"][i]))
        if ran_anyway and g < prev_g:
            cause = ("a step whose gradients held inf/NaN was applied: skip optimizer.step() "
                     "when unscale_ found one")
        elif ran_anyway or (w < prev_w and g >= prev_g):
            cause = ("an inf/NaN gradient was missed: unscale_ must check every gradient of "
                     "every parameter (not only the first) and update() must back off")
        elif g == w:
            continue
        elif g > prev_g and w == prev_w:
            cause = ("the scale grew before growth_interval clean steps: count clean steps and "
                     "grow only when the count reaches growth_interval, then restart it")
        elif w > prev_w and g == prev_g:
            cause = ("the scale did not grow after growth_interval clean steps in a row (an "
                     "overflow restarts the count)")
        else:
            cause = "scale differs from torch.amp.GradScaler's"
        raise AssertionError(f"{name}: {cause} (README §5) — scale after step {i} is {g:g}, "
                             f"GradScaler's {w:g}")
    if len(got["scales"]) != len(want["scales"]):
        raise AssertionError(f"{name}: {len(got['scales'])} steps recorded")


def check_skips(name: str, got: dict, want: dict) -> None:
    for i, (g, w) in enumerate(zip(got["stepped"], want["stepped"])):
        for k, (gk, wk) in enumerate(zip(g, w)):
            which = f"optimizer {k}" if len(g) > 1 else "the optimizer"
            if gk and not wk:
                raise AssertionError(
                    f"{name}: step {i} ran {which} although its gradients held inf/NaN: skip "
                    f"optimizer.step() when unscale_ found an inf/NaN (README §5)")
            if wk and not gk:
                raise AssertionError(
                    f"{name}: step {i} skipped {which} although its gradients were finite "
                    f"(README §5); only an optimizer whose own gradients overflowed skips")


def check_params(name: str, got: dict, want: dict, hint: str) -> None:
    for key, value in want["params"].items():
        close(got["params"].get(key), value, f"{name}: final {key}", hint)


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
@pytest.mark.parametrize("name", ["injected", "overflowing"],
                         ids=["overflow=injected-inf", "overflow=scale-too-large"])
def test_scale_after_every_step_equals_gradscaler(results, name):
    check_scales(name, run_of(results, name), reference(name))


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
@pytest.mark.parametrize("name", ["injected", "overflowing"],
                         ids=["overflow=injected-inf", "overflow=scale-too-large"])
def test_skipped_steps_equal_gradscaler(results, name):
    check_skips(name, run_of(results, name), reference(name))


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
@pytest.mark.parametrize("name", ["injected", "overflowing"],
                         ids=["overflow=injected-inf", "overflow=scale-too-large"])
def test_final_parameters_equal_gradscaler(results, name):
    got = run_of(results, name)
    check_params(name, got, reference(name), said(
        hint="gradients must be unscaled exactly once per step, multiplying by 1/scale"))


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
def test_unscale_before_step_is_not_repeated(results):
    name = "explicit-unscale"
    got, want = run_of(results, name), reference(name)
    check_scales(name, got, want)
    check_skips(name, got, want)
    check_params(name, got, want, said(
        hint=("with unscale_ called before step(), step() must not unscale again: the gradients "
              "were divided twice (README §5)")))


@pytest.mark.points(2)
@pytest.mark.exercises("DynamicLossScaler")
def test_two_optimizers_skip_apart_and_share_the_scale(results):
    name = "two-optimizers"
    got, want = run_of(results, name), reference(name)
    check_scales(name, got, want)
    check_skips(name, got, want)
    check_params(name, got, want, said(hint="each optimizer is unscaled once and steps unless "
                                            "its own gradients overflowed (README §5)"))


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_step_returns_whether_it_stepped(results):
    for name in ("injected", "two-optimizers"):
        got = run_of(results, name)
        for i, (ran, returned) in enumerate(zip(got["stepped"], got["returned"])):
            assert list(returned) == list(ran), (
                f"{name}: step() at step {i} returned {returned}, expected {ran}: True when "
                f"optimizer.step() ran, False when skipped (README §5)")


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_defaults_are_gradscalers(results):
    got = outcome(results, "probe-defaults", "DynamicLossScaler")
    assert got == [65536.0, 2.0, 0.5, 2000], (
        f"DynamicLossScaler(): (scale, growth_factor, backoff_factor, growth_interval) = {got}, "
        f"expected GradScaler's defaults [65536.0, 2.0, 0.5, 2000] (README §5)")


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_scale_multiplies_the_loss_and_its_gradient(results):
    got = outcome(results, "probe-scale", "DynamicLossScaler.scale")
    w = torch.tensor([1.5, -2.0])
    hint = said(hint="scale(loss) is loss * scale, kept in the graph (README §5)")
    close(got[0], (w * w).sum() * 1001, "scale(loss) with init_scale 1001", hint)
    close(got[1], 2 * w * 1001, "gradient through scale(loss)", hint)


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_update_without_unscale_changes_nothing(results):
    got = outcome(results, "probe-update_alone", "DynamicLossScaler.update")
    assert got == 8.0, (f"update() with no optimizer unscaled since the last update changed the "
                        f"scale 8 -> {got}; it must change nothing (README §5)")


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_a_second_unscale_before_update_raises(results):
    got = outcome(results, "probe-second_unscale", "DynamicLossScaler.unscale_")
    assert got[0] == "raised", ("a second unscale_ of the same optimizer before update() must "
                                "raise RuntimeError (README §5)")
    close(got[1], torch.ones(3), "gradient of sum(w) after scale 4 and unscale_",
          said(hint="unscale_ divides by the scale once"))
    by_3 = outcome(results, "probe-unscale_by_3", "DynamicLossScaler.unscale_")
    inv = torch.tensor(1.0 / 3.0, dtype=torch.float32)
    close(by_3, torch.tensor([1.0, 2.0, 5.0, 7.0]) * inv, "gradients unscaled by 3",
          said(hint="multiply by the float32 reciprocal 1/scale (README §5)"))


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_bad_arguments_raise(results):
    got = outcome(results, "probe-bad_args", "DynamicLossScaler")
    names = ["init_scale=0", "growth_factor=1", "backoff_factor=1", "backoff_factor=0",
             "growth_interval=0"]
    missed = [n for n, raised in zip(names, got) if not raised]
    assert not missed, f"DynamicLossScaler({missed[0]}) must raise ValueError (README §5)"
    assert got[len(names):] == [False], ("DynamicLossScaler(init_scale=0.5) raised ValueError; "
                                         "any init_scale > 0 is allowed (README §5)")

