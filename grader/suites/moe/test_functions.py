"""The single-process functions against plain-torch references: route (softmax over all experts,
top-k, renormalised), the load-balancing loss and the z-loss (values and gradients), the
capacity formula and the drop order (README §2-§4). Read from rank 0 of the 2-rank launch.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.moe._cases import cases_for, run, values
from grader.suites.moe._cases_units import CAPACITY_ARGS, ROUTE, Z_LOSS

WORLD = 2


def _case(launch, impl, name: str):
    result = run(launch, impl, WORLD)
    return values(result, name)[0], cases_for(WORLD)[name]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-9, rtol=1e-9)


def _is_wrong(got, wrong: torch.Tensor, right: torch.Tensor) -> bool:
    """`got` equals a known wrong value that this case tells apart from the right one."""
    if not isinstance(got, torch.Tensor) or got.numel() != wrong.numel():
        return False
    got = got.reshape(wrong.shape)
    return _same(got, wrong) and not _same(right, wrong)


@pytest.mark.exercises("route")
@pytest.mark.points(2)
@pytest.mark.parametrize("name", list(ROUTE))
def test_route(launch, impl, name):
    got, case = _case(launch, impl, f"route {name}")
    e = case["expected"]
    what = f"route(logits, k={case['k']})"
    probs = got["probs"]
    if _is_wrong(probs, e["topk_softmax_probs"], e["probs"]):
        raise AssertionError(f"{what} probs: the softmax is over all E experts, not only the "
                             f"k chosen (the load-balancing loss averages these)")
    assert_close(probs, e["probs"], what=f"{what} probs", hint_first=True,
                 hint="probs is the softmax of the logits over all E experts")
    experts = got["experts"]
    assert isinstance(experts, torch.Tensor) and experts.dtype == torch.int64, (
        f"{what} experts: expected an int64 tensor, got {getattr(experts, 'dtype', experts)}")
    assert torch.equal(experts, e["experts"]), (
        f"{what} experts: the k most probable experts per token in descending order of "
        f"probability; got {experts[:2].tolist()}..., expected {e['experts'][:2].tolist()}...")
    weights = got["weights"]
    if _is_wrong(weights, e["raw_weights"], e["weights"]):
        raise AssertionError(f"{what} weights are the raw probabilities: renormalise the k "
                             f"chosen probabilities so each token's weights sum to 1")
    assert_close(weights, e["weights"], what=f"{what} weights", hint_first=True,
                 hint="renormalise the k chosen probabilities (each row sums to 1)")
    assert_close(got["grad"], e["grad"], what=f"{what} gradient of the logits",
                 hint_first=True, hint="weights and probs must both stay differentiable")


LB = ["perfect_balance", "k=2", "k=1-skewed"]


@pytest.mark.exercises("load_balancing_loss")
@pytest.mark.points(2)
@pytest.mark.parametrize("name", LB)
def test_load_balancing_loss(launch, impl, name):
    got, case = _case(launch, impl, f"load_balancing_loss {name}")
    e = case["expected"]
    what = f"load_balancing_loss ({name})"
    loss = got["loss"]
    if _is_wrong(loss, e["f_from_probs"], e["loss"]):
        raise AssertionError(f"{what}: f_i is the fraction of assignments that chose expert i "
                             f"(a count from `experts`), not the mean probability")
    if _is_wrong(loss, e["no_E"], e["loss"]):
        raise AssertionError(f"{what}: multiply by the number of experts E (the loss is 1 at "
                             f"perfect balance)")
    assert_close(loss, e["loss"], what=what, hint_first=True,
                 hint="E * sum_i f_i * P_i; f_i = share of the T*k assignments, P_i = mean prob")
    assert_close(got["grad"], e["grad"], what=f"{what}: gradient of the logits",
                 hint_first=True, hint="the gradient flows through P_i only (f_i is a count)")


@pytest.mark.exercises("router_z_loss")
@pytest.mark.points(2)
@pytest.mark.parametrize("name", list(Z_LOSS))
def test_router_z_loss(launch, impl, name):
    got, case = _case(launch, impl, f"router_z_loss {name}")
    e = case["expected"]
    what = f"router_z_loss ({name})"
    loss = got["loss"]
    if _is_wrong(loss, e["no_square"], e["loss"]):
        raise AssertionError(f"{what}: square the logsumexp of each token before the mean")
    if _is_wrong(loss, e["sum"], e["loss"]):
        raise AssertionError(f"{what}: the mean over tokens, not the sum")
    assert_close(loss, e["loss"], what=what, hint_first=True,
                 hint="mean over tokens of logsumexp(logits[t])**2, computed with logsumexp")
    assert_close(got["grad"], e["grad"], what=f"{what}: gradient of the logits")


@pytest.mark.exercises("expert_capacity")
@pytest.mark.points(3)
def test_expert_capacity(launch, impl):
    got, case = _case(launch, impl, "expert_capacity")
    for args, value, want in zip(CAPACITY_ARGS, got, case["expected"]):
        tokens, experts, k, cf = args
        assert value == want and isinstance(value, int), (
            f"expert_capacity(num_tokens={tokens}, num_experts={experts}, k={k}, "
            f"capacity_factor={cf}) returned {value!r}; ceil(k*T*cf/E) = {want} (an int; ceil, "
            f"not floor or round)")


@pytest.mark.exercises("capacity_mask")
@pytest.mark.points(4)
def test_capacity_mask(launch, impl):
    got, case = _case(launch, impl, "capacity_mask")
    for (experts, n, cap), keep, want, wrong in zip(case["args"], got, case["expected"],
                                                    case["token_major"]):
        what = f"capacity_mask(experts [{experts.shape[0]}, {experts.shape[1]}], E={n}, " \
               f"capacity={cap})"
        assert isinstance(keep, torch.Tensor) and keep.dtype == torch.bool and \
            keep.shape == want.shape, (f"{what}: expected a bool tensor of shape "
                                       f"{tuple(want.shape)}, got {getattr(keep, 'dtype', keep)}"
                                       f" {tuple(getattr(keep, 'shape', ()))}")
        if torch.equal(keep, want):
            continue
        if torch.equal(keep, wrong):
            raise AssertionError(f"{what}: wrong drop order (token by token): every first "
                                 f"choice comes before any second choice, then tokens in order")
        bad = (keep != want).nonzero().tolist()
        raise AssertionError(f"{what}: {len(bad)} assignments differ, first (token, choice) = "
                             f"{bad[0]}: got {bool(keep[tuple(bad[0])])}; keep the first "
                             f"`capacity` per expert, choice column by column, tokens in order")
