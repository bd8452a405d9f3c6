"""MoELayer against a dense single-process MoE with the same weights (every expert local), on 2
and 4 ranks, top-1 and top-2, with and without a capacity, and with one rank whose experts no
token chooses: the output, the router logits, the input and router gradients (this rank's tokens
only) and the gradients of this rank's experts (every rank's tokens that reached them).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.suites.moe._cases import LAYER_SPECS, cases_for, layer_name, run, values
from grader.suites.moe._ref import EXPERTS, check, diagnose, grad_or_zeros
from harness import NotImplementedInRank, RankFailure, RankTimeout
from harness.cases import where

pytestmark = pytest.mark.exercises("MoELayer")

CASES = [pytest.param(world, layer_name(k, cf, empty is not None),
                      id=f"world_size={world}-{layer_name(k, cf, empty is not None)}")
         for world in (2, 4) for k, cf, _, empty in LAYER_SPECS[world]]


def _read(launch, impl, world: int, name: str):
    result = run(launch, impl, world)
    case = cases_for(world)[f"layer {name}"]
    try:
        return values(result, f"layer {name}"), case
    except (RankFailure, RankTimeout) as exc:
        first = str(exc).splitlines()[0]
        # This case hung (found by the stall watch; the launch was made again without it), or
        # one of its collectives timed out: a rank left the others waiting.
        hung = isinstance(exc, RankTimeout) or "imed out" in first
        if isinstance(exc, NotImplementedInRank) or not hung:
            raise
        raise AssertionError(
            f"MoELayer ({name}) on {world} ranks: a rank left out a collective, every rank must "
            f"make every all-to-all, also one whose experts got no token (keep its results "
            f"attached to the received rows so backward runs): {first}") from None


@pytest.mark.points(2)
@pytest.mark.parametrize("world,name", CASES)
def test_forward(launch, impl, world, name):
    got, case = _read(launch, impl, world, name)
    expected = case["expected"]["ranks"]
    for r, v in enumerate(got):
        what = f"{where(r, world)} MoELayer ({name})"
        check(v["logits"], expected[r]["logits"], f"{what} router logits",
              hint="logits = router(x) with the replicated router weight [E, H]")
        y = v["y"]
        if not bool((y - expected[r]["y"]).abs().max() <= 1e-8):
            cause = diagnose(case["xs"][r], case["params"], case["k"], case["cf"], y)
            if cause == "no_weights":
                raise AssertionError(f"{what} output: the plain sum of the expert outputs; "
                                     f"multiply each expert's output by its router weight")
            if cause == "renormalise_kept":
                raise AssertionError(f"{what} output: a dropped choice contributes nothing and "
                                     f"the kept ones keep their weights: do not renormalise "
                                     f"over the kept ones")
            if cause == "no_drop":
                raise AssertionError(f"{what} output: nothing was dropped; drop what exceeds "
                                     f"C = expert_capacity(T, E, k, capacity_factor) per expert")
            if cause == "token_major":
                raise AssertionError(f"{what} output: wrong drop order; every first choice "
                                     f"comes before any second choice (capacity_mask)")
        check(y, expected[r]["y"], f"{what} output",
              hint=f"route, drop over capacity, send to expert e's rank e // (E/N) "
                   f"(E={EXPERTS}, N={world}), SwiGLU, send back, weight and add")


BACKWARD_HINT = "both all-to-alls must carry the gradient back (backward = reverse)"
FORWARD_FIRST_HINT = ("the forward of this case is already wrong (output or router logits; see "
                      "test_forward): fix it first, the gradients follow from it")


def _matches(got: Any, want: torch.Tensor) -> bool:
    """Whether a forward value equals the reference within the suite's tolerance."""
    try:
        check(got, want, "forward")
    except AssertionError:
        return False
    return True


@pytest.mark.points(1)
@pytest.mark.parametrize("world,name", CASES)
def test_backward(launch, impl, world, name):
    got, case = _read(launch, impl, world, name)
    expected = case["expected"]
    local = EXPERTS // world
    forward_ok = all(_matches(v["y"], expected["ranks"][r]["y"])
                     and _matches(v["logits"], expected["ranks"][r]["logits"])
                     for r, v in enumerate(got))
    for r, v in enumerate(got):
        what = f"{where(r, world)} MoELayer ({name})"
        rank_ref = expected["ranks"][r]
        # The all-to-all hint only when the evidence holds: this case's forward matched.
        check(v["x_grad"], rank_ref["x_grad"], f"{what} input gradient",
              hint=BACKWARD_HINT if forward_ok else FORWARD_FIRST_HINT)
        check(v["router_grad"], rank_ref["router_grad"], f"{what} router weight gradient",
              hint="this rank's tokens only, through the renormalised router weights")
        mine = slice(r * local, (r + 1) * local)
        for param in ("w_gate", "w_up", "w_down"):
            want = expected[f"{param}_grad"][mine]
            check(grad_or_zeros(v[f"{param}_grad"], want), want, f"{what} {param} gradient",
                  hint="this rank's experts, summed over the tokens of every rank")
