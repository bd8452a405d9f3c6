"""ParallelMLP against the dense MLP down(gelu(up(x))) on 2 and 4 ranks: values, cost, memory.

Cost is read from the harness's log of every torch.distributed call, in two windows that the
rank marks around forward and backward: each must hold exactly one all-reduce of
batch*seq*hidden elements and nothing else (README §6). Memory is what the sharded module holds
right after `from_dense`: 1/p of the dense weights and of up's bias, plus down's whole bias.
"""

from __future__ import annotations

import pytest

from grader.suites.tensor_parallel._cases import (
    ALL_REDUCE_OPS,
    BACKEND,
    TIMEOUT_S,
    TRANSPORT,
    inputs_only,
)
from grader.suites.tensor_parallel._ranks import build_linear, leaf, param_grad
from grader.suites.tensor_parallel._ref import (
    check,
    comm_windows,
    dense_linear,
    dense_mlp_run,
    describe,
    linear_state,
    randn,
    shard,
)
from harness.cases import case_values, launch_cases, run_cases, where

WORLDS = (2, 4)
HIDDEN, FFN = 8, 32
BATCH, SEQ = 2, 5
TOKENS_X_HIDDEN = BATCH * SEQ * HIDDEN


def _case(bias: bool, seed: int) -> dict:
    up, down = dense_linear(HIDDEN, FFN, bias, seed), dense_linear(FFN, HIDDEN, bias, seed + 1)
    x, grad_y = randn(seed + 2, BATCH, SEQ, HIDDEN), randn(seed + 3, BATCH, SEQ, HIDDEN)
    return {"up": linear_state(up), "down": linear_state(down), "x": x, "grad_y": grad_y,
            "expected": dense_mlp_run(up, down, x, grad_y)}


CASES = {"mlp": _case(True, 40), "mlp without bias": _case(False, 50)}


def rank_mlp(ctx, cases) -> dict:
    from harness import storage_bytes

    tp = ctx.impl_module("tensor_parallel", "layers")

    built = {}  # name -> the module its "built" part made

    def build(name, data):
        built[name] = tp.ParallelMLP.from_dense(build_linear(data["up"]),
                                                build_linear(data["down"]))
        return {"bytes": storage_bytes(built[name])}

    def run(name, data):
        # When the "built" part failed, building again raises the same error here (a stub's
        # NotImplementedError included), so this part is graded like that one.
        mlp = built[name] if name in built else tp.ParallelMLP.from_dense(
            build_linear(data["up"]), build_linear(data["down"]))
        x = leaf(data["x"])
        ctx.mark(f"{name} forward")
        y = mlp(x)
        ctx.mark(f"{name} backward")
        y.backward(data["grad_y"])
        ctx.mark(f"{name} end")
        grads = {layer: {"weight": param_grad(getattr(mlp, layer).weight),
                         "bias": param_grad(getattr(mlp, layer).bias)}
                 for layer in ("up", "down")}
        return {"y": y.detach(), "x_grad": x.grad, **grads}

    parts = []
    for name in cases:
        parts.append((f"{name} built", lambda n=name: build(n, cases[n])))
        parts.append((name, lambda n=name: run(n, cases[n])))
    return run_cases(ctx, parts)


@pytest.fixture(scope="module")
def runs(launch):
    # A part that hangs costs only itself (harness.cases.launch_cases).
    names = [part for name in CASES for part in (f"{name} built", name)]
    return {p: launch_cases(lambda env, p=p: launch(
        rank_mlp, world_size=p, args=(inputs_only(CASES),), backend=BACKEND,
        transport=TRANSPORT, timeout=TIMEOUT_S, env=env), names) for p in WORLDS}


def _each(runs, name="mlp"):
    for p, result in runs.items():
        for r, value in enumerate(case_values(result.values, name)):
            yield r, p, value, comm_windows(result, r)


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(3)
def test_mlp_forward(runs):
    expected = CASES["mlp"]["expected"]
    for r, p, value, _ in _each(runs):
        check(value["y"], expected["y"], f"{where(r, p)} ParallelMLP output",
              hint="column-parallel up, exact GELU, row-parallel down with its bias added once")


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(3)
def test_mlp_backward(runs):
    expected = CASES["mlp"]["expected"]
    for r, p, value, _ in _each(runs):
        what = f"{where(r, p)} ParallelMLP"
        check(value["x_grad"], expected["x_grad"], f"{what} input gradient",
              hint="up's input gradient is summed over the group (f)")
        check(value["up"]["weight"], shard(expected["up"]["weight"], r, p, dim=0),
              f"{what} up.weight gradient")
        check(value["up"]["bias"], shard(expected["up"]["bias"], r, p), f"{what} up.bias gradient")
        check(value["down"]["weight"], shard(expected["down"]["weight"], r, p, dim=1),
              f"{what} down.weight gradient")
        check(value["down"]["bias"], expected["down"]["bias"], f"{what} down.bias gradient")


def _check_one_all_reduce(records, what: str) -> None:
    comm = [rec for rec in records if rec.op != "mark"]
    ok = len(comm) == 1 and comm[0].op in ALL_REDUCE_OPS and comm[0].numel == TOKENS_X_HIDDEN
    assert ok, (
        f"{what} made {describe(comm)}; the budget is exactly one all_reduce of "
        f"batch*seq*hidden = {TOKENS_X_HIDDEN} elements (the GELU between the column and the row "
        f"layer needs no communication)")


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(2)
def test_mlp_forward_is_one_all_reduce(runs):
    for r, p, _, win in _each(runs):
        _check_one_all_reduce(win["mlp forward"], f"{where(r, p)} ParallelMLP forward")


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(2)
def test_mlp_backward_is_one_all_reduce(runs):
    for r, p, _, win in _each(runs):
        _check_one_all_reduce(win["mlp backward"], f"{where(r, p)} ParallelMLP backward")


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(2)
def test_mlp_weight_memory_is_one_pth(runs):
    up, down = CASES["mlp"]["up"], CASES["mlp"]["down"]
    size = up["weight"].element_size()
    dense = (up["weight"].numel() + up["bias"].numel() + down["weight"].numel()) * size
    replicated = down["bias"].numel() * size
    for r, p, value, _ in _each(runs, "mlp built"):
        budget = dense // p + replicated
        assert value["bytes"] <= budget, (
            f"{where(r, p)} ParallelMLP.from_dense holds {value['bytes']} bytes of tensors; the "
            f"shard is 1/{p} of the dense weights plus down's bias, {budget} bytes. Copy the "
            f"slices (.clone()) instead of keeping views of the dense weights")


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(2)
def test_mlp_without_bias(runs):
    expected = CASES["mlp without bias"]["expected"]
    for r, p, value, win in _each(runs, "mlp without bias"):
        what = f"{where(r, p)} ParallelMLP without bias"
        check(value["y"], expected["y"], f"{what}: output")
        check(value["x_grad"], expected["x_grad"], f"{what}: input gradient")
        check(value["down"]["bias"], None, f"{what}: down.bias gradient")
        _check_one_all_reduce(win["mlp without bias forward"], f"{what}: forward")
