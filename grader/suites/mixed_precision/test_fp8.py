"""Fp8Linear: delayed scaling's state, outputs and gradients against the documented emulation
(README §8), computed here with torch's own fp8 casts.

One layer of history length 3 is called six times with inputs and output gradients whose
amax rises and falls, so the history rolls over and its maximum, not the newest amax, sets the
scale; one call runs under no_grad. A fresh layer fed zeros keeps its scale of 1, and an
input holding inf keeps the scale until the inf leaves the history.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.mixed_precision._cases import launch_cases, outcome
from grader.suites.mixed_precision._ranks import rank_fp8
from grader.suites.mixed_precision._ref import close, fp8_reference, said

AMAX_X = (3.0, 40.0, 0.5, 0.25, 0.1, 0.2)
AMAX_G = (1e-3, 1e-4, 5.0, None, 1e-4, 1e-5)  # None: that call runs under no_grad


def spec(seed: int) -> dict:
    gen = seeded_generator(seed)
    xs: list[torch.Tensor] = []
    gs: list[torch.Tensor | None] = []
    for ax, ag in zip(AMAX_X, AMAX_G):
        x = torch.randn(5, 8, generator=gen)
        xs.append(x / x.abs().max() * ax)
        if ag is None:
            gs.append(None)
        else:
            g = torch.randn(5, 4, generator=gen)
            gs.append(g / g.abs().max() * ag)
    return {"in": 8, "out": 4, "h": 3, "weight": torch.randn(4, 8, generator=gen) * 0.3,
            "bias": torch.randn(4, generator=gen), "xs": xs, "gs": gs}


def zeros_spec() -> dict:
    return {"in": 3, "out": 2, "h": 2, "weight": torch.zeros(2, 3), "bias": None,
            "xs": [torch.zeros(4, 3)], "gs": [torch.zeros(4, 2)]}


def inf_spec() -> dict:
    """The second call's input holds +inf: its amax is inf, so every scale derived from the
    history is kept until the inf drops off (history length 2)."""
    gen = seeded_generator(72)
    xs = [torch.randn(4, 3, generator=gen) for _ in range(3)]
    xs[1][2, 1] = float("inf")
    return {"in": 3, "out": 2, "h": 2, "weight": torch.randn(2, 3, generator=gen),
            "bias": torch.zeros(2), "xs": xs, "gs": [None, None, None]}


SPEC = spec(71)
ZEROS = zeros_spec()
INF = inf_spec()


@pytest.fixture(scope="module")
def results(launch):
    return launch_cases(launch, rank_fp8,
                        {"calls": SPEC, "zeros": ZEROS, "inf": INF,
                         "errors": {"probe": "errors"},
                         "default": {"probe": "default_history"}})


def calls_of(results: dict, key: str) -> list[dict]:
    got = outcome(results, key, "Fp8Linear")
    if not isinstance(got, dict) or "calls" not in got:
        raise AssertionError(f"Fp8Linear: the run returned {got!r:.80}")
    return got["calls"]


STATE_HINT = ("the scale is 448 / max(amax history) (57344 for grad), the newest amax at "
              "index 0, quantising with the scale from earlier calls (README §8)")


def check_state(got: dict, want: dict, when: str, kinds: tuple[str, ...]) -> None:
    for kind in kinds:
        hist, scale = f"{kind}_amax_history", f"{kind}_scale"
        if scale not in got or hist not in got:
            raise AssertionError(f"Fp8Linear has no buffer {scale} / {hist} (README §8)")
        close(got[hist], want[hist], f"{hist} {when}", said(hint=STATE_HINT))
        newest = float(got[hist][0]) if got[hist].numel() else 0.0
        current = torch.tensor(448.0 if kind != "grad" else 57344.0) / newest if newest else None
        hint = STATE_HINT
        if current is not None and not torch.allclose(want[scale], current) and \
                torch.allclose(got[scale], current):
            hint = ("scale from the current amax instead of the history's maximum: delayed "
                    "scaling uses max(amax history) (README §8)")
        close(got[scale], want[scale], f"{scale} {when}", hint)


@pytest.mark.points(3)
@pytest.mark.exercises("Fp8Linear")
def test_forward_scales_and_histories_follow_delayed_scaling(results):
    got, want = calls_of(results, "calls"), fp8_reference(SPEC)
    for i, (g, w) in enumerate(zip(got, want)):
        check_state(g["fwd"], w["fwd"], f"after forward call {i}", ("x", "w"))


@pytest.mark.points(3)
@pytest.mark.exercises("Fp8Linear")
def test_outputs_equal_the_fp8_emulation(results):
    got, want = calls_of(results, "calls"), fp8_reference(SPEC)
    for i, (g, w) in enumerate(zip(got, want)):
        close(g["y"], w["y"], f"Fp8Linear output of call {i}", said(
            hint=("quantise x and W to E4M3 with the scales from before this call (clamp to "
                  "±448, round to nearest even), matmul the dequantised values, add the bias")))


@pytest.mark.points(2)
@pytest.mark.exercises("Fp8Linear")
def test_backward_scale_and_history_of_the_output_gradient(results):
    got, want = calls_of(results, "calls"), fp8_reference(SPEC)
    for i, (g, w) in enumerate(zip(got, want)):
        if "bwd" in w:
            check_state(g.get("bwd", {}), w["bwd"], f"after backward call {i}", ("grad",))


@pytest.mark.points(3)
@pytest.mark.exercises("Fp8Linear")
def test_gradients_equal_the_fp8_emulation(results):
    got, want = calls_of(results, "calls"), fp8_reference(SPEC)
    hint = said(hint=("quantise the output gradient to E5M2 with grad_scale (clamp to ±57344), "
                      "multiply with the forward's dequantised operands; bias: the plain sum"))
    for i, (g, w) in enumerate(zip(got, want)):
        if "dx" not in w:
            continue
        close(g.get("dx"), w["dx"], f"grad of x, call {i}", hint)
        close(g.get("dw"), w["dw"], f"grad of weight, call {i}", hint)
        close(g.get("db"), w["db"], f"grad of bias, call {i}", hint)


@pytest.mark.points(1)
@pytest.mark.exercises("Fp8Linear")
def test_zero_amax_keeps_the_scale(results):
    got, want = calls_of(results, "zeros"), fp8_reference(ZEROS)
    check_state(got[0]["bwd"], want[0]["bwd"], "after a call on zeros", ("x", "w", "grad"))
    close(got[0]["y"], want[0]["y"], "output on zeros without bias")


@pytest.mark.points(1)
@pytest.mark.exercises("Fp8Linear")
def test_infinite_amax_keeps_the_scale(results):
    got, want = calls_of(results, "inf"), fp8_reference(INF)
    for i, (g, w) in enumerate(zip(got, want)):
        check_state(g["fwd"], w["fwd"], f"after call {i} (call 1's input holds inf)", ("x",))


@pytest.mark.points(1)
@pytest.mark.exercises("Fp8Linear")
def test_bad_shapes_and_history_raise_and_the_default_history(results):
    got = outcome(results, "errors", "Fp8Linear")
    shapes = outcome(results, "default", "Fp8Linear")
    assert shapes == [[16], [1]], (
        f"history shapes of Fp8Linear(4, 2) and Fp8Linear(4, 2, history_len=1): {shapes}; the "
        f"default history_len is 16 and 1 is allowed (README §8)")
    assert got == ["ValueError"] * 3, (
        f"Fp8Linear(history_len=0), x of shape [3, 5] for in_features=4 and a 1-D x gave "
        f"{got}; each must raise ValueError (README §8)")
