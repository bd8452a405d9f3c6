"""The four conjugate operators in isolation, on 2 and 4 ranks, with inputs made of the rank.

f and g are checked value by value and call by call: f communicates only in backward, g only in
forward, each with one all-reduce of the tensor's size. scatter and gather are checked for the
slice they keep, the order they concatenate in, and their gradients.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.tensor_parallel._cases import (
    ALL_REDUCE_OPS,
    BACKEND,
    DTYPE,
    TIMEOUT_S,
    TRANSPORT,
)
from grader.suites.tensor_parallel._ranks import leaf
from grader.suites.tensor_parallel._ref import check, comm_windows, describe
from harness.cases import case_values, launch_cases, run_cases, where

WORLDS = (2, 4)
SHAPE = (2, 3, 4)  # leading dims differ so that a split or concat along the wrong dim shows


def rank_operators(ctx) -> dict:
    tp = ctx.impl_module("tensor_parallel", "layers")
    r, p = ctx.rank, ctx.world_size
    base = torch.arange(24, dtype=DTYPE).reshape(SHAPE)

    def run(name, op, x, grad_y):
        ctx.mark(f"{name} forward")
        y = op(x)
        ctx.mark(f"{name} backward")
        failed = None  # the forward's value is judged first, even if the backward raises
        try:
            y.backward(grad_y)
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported by the test, after the forward
            failed = f"{type(exc).__name__}: {str(exc)[:300]}"
        ctx.mark(f"{name} end")
        return {"y": y.detach(), "x_grad": x.grad, "x_after": x.detach(),
                "backward_raised": failed}

    return run_cases(ctx, [
        # f: each rank passes its own values, so an identity forward is visible as such.
        ("f", lambda: run("f", tp.copy_to_parallel_region, leaf(base + 100 * r),
                          torch.full(SHAPE, r + 1.0, dtype=DTYPE))),
        ("g", lambda: run("g", tp.reduce_from_parallel_region,
                          leaf(torch.full(SHAPE, r + 1.0, dtype=DTYPE)), base + 100 * r)),
        ("scatter", lambda: run("scatter", tp.scatter_to_parallel_region,
                                leaf(torch.arange(6 * 4 * p, dtype=DTYPE).reshape(2, 3, 4 * p)),
                                torch.full(SHAPE, r + 1.0, dtype=DTYPE))),
        ("gather", lambda: run("gather", tp.gather_from_parallel_region,
                               leaf(base + 100 * r),
                               torch.arange(6 * 4 * p, dtype=DTYPE).reshape(2, 3, 4 * p))),
    ])


OPERATORS = ("f", "g", "scatter", "gather")  # rank_operators' parts, in order


@pytest.fixture(scope="module")
def runs(launch):
    # A part that hangs costs only itself (harness.cases.launch_cases).
    return {p: launch_cases(lambda env, p=p: launch(
        rank_operators, world_size=p, backend=BACKEND, transport=TRANSPORT, timeout=TIMEOUT_S,
        env=env), OPERATORS) for p in WORLDS}


def _each(runs, name):
    """(rank, world, value, log windows of this part) over every rank of every world size."""
    for p, result in runs.items():
        values = case_values(result.values, name)
        for r, value in enumerate(values):
            yield r, p, value, comm_windows(result, r)


def _backward(value, what: str, *, hint: str) -> None:
    """The backward of the part must have run (its forward was judged before)."""
    if value.get("backward_raised"):
        raise AssertionError(f"{what}: {hint}; backward raised {value['backward_raised']}")


def _one_all_reduce(records, numel) -> bool:
    comm = [rec for rec in records if rec.op != "mark"]
    return len(comm) == 1 and comm[0].op in ALL_REDUCE_OPS and comm[0].numel == numel


BASE = torch.arange(24, dtype=DTYPE).reshape(SHAPE)


@pytest.mark.exercises("copy_to_parallel_region")
@pytest.mark.points(2)
def test_f_forward_is_identity_without_communication(runs):
    for r, p, value, win in _each(runs, "f"):
        check(value["y"], BASE + 100 * r, f"{where(r, p)} copy_to_parallel_region forward",
              hint="f returns its input unchanged")
        assert not [rec for rec in win["f forward"]], (
            f"{where(r, p)} copy_to_parallel_region forward made {describe(win['f forward'])}; "
            f"f's input is already replicated, so forward needs no communication")


@pytest.mark.exercises("copy_to_parallel_region")
@pytest.mark.points(3)
def test_f_backward_all_reduces_the_gradient(runs):
    for r, p, value, win in _each(runs, "f"):
        _backward(value, f"{where(r, p)} copy_to_parallel_region backward",
                  hint="f's backward sums the gradient over the group (all-reduce)")
        check(value["x_grad"], torch.full(SHAPE, p * (p + 1) / 2, dtype=DTYPE),
              f"{where(r, p)} copy_to_parallel_region: gradient of the input",
              hint="f's backward sums the gradient over the group (all-reduce)")
        assert _one_all_reduce(win["f backward"], 24), (
            f"{where(r, p)} copy_to_parallel_region backward made "
            f"{describe(win['f backward'])}; expected exactly one all_reduce of the gradient "
            f"(24 elements)")


@pytest.mark.exercises("reduce_from_parallel_region")
@pytest.mark.points(3)
def test_g_forward_all_reduces(runs):
    for r, p, value, win in _each(runs, "g"):
        check(value["y"], torch.full(SHAPE, p * (p + 1) / 2, dtype=DTYPE),
              f"{where(r, p)} reduce_from_parallel_region forward",
              hint="g sums the partial results of the group")
        check(value["x_after"], torch.full(SHAPE, r + 1.0, dtype=DTYPE),
              f"{where(r, p)} reduce_from_parallel_region: the input after the call",
              hint="all-reduce a copy; the input must not change")
        assert _one_all_reduce(win["g forward"], 24), (
            f"{where(r, p)} reduce_from_parallel_region forward made "
            f"{describe(win['g forward'])}; expected exactly one all_reduce of 24 elements")


@pytest.mark.exercises("reduce_from_parallel_region")
@pytest.mark.points(2)
def test_g_backward_is_identity_without_communication(runs):
    for r, p, value, win in _each(runs, "g"):
        _backward(value, f"{where(r, p)} reduce_from_parallel_region backward",
                  hint="g's backward passes the gradient through unchanged")
        check(value["x_grad"], BASE + 100 * r,
              f"{where(r, p)} reduce_from_parallel_region: gradient of the input",
              hint="g's backward passes the gradient through unchanged")
        assert not win["g backward"], (
            f"{where(r, p)} reduce_from_parallel_region backward made "
            f"{describe(win['g backward'])}; the gradient of a sum reaches every term as is")


@pytest.mark.exercises("scatter_to_parallel_region")
@pytest.mark.points(3)
def test_scatter_keeps_the_rank_slice_and_gathers_gradients(runs):
    for r, p, value, win in _each(runs, "scatter"):
        full = torch.arange(6 * 4 * p, dtype=DTYPE).reshape(2, 3, 4 * p)
        check(value["y"], full[..., 4 * r:4 * (r + 1)],
              f"{where(r, p)} scatter_to_parallel_region forward",
              hint="keep slice r (the group rank) of the LAST dim")
        expected_grad = torch.cat([torch.full(SHAPE, q + 1.0, dtype=DTYPE) for q in range(p)],
                                  dim=-1)
        what = f"{where(r, p)} scatter_to_parallel_region: gradient of the input"
        _backward(value, what, hint="backward all-gathers every rank's gradient slice along "
                                    "the last dim, in group-rank order")
        check(value["x_grad"], expected_grad, what,
              hint="backward all-gathers every rank's gradient slice along the last dim, in "
                   "group-rank order")
        assert not win["scatter forward"], (
            f"{where(r, p)} scatter_to_parallel_region forward made "
            f"{describe(win['scatter forward'])}; keeping a slice needs no communication")


@pytest.mark.exercises("gather_from_parallel_region")
@pytest.mark.points(3)
def test_gather_concatenates_in_rank_order_and_slices_gradients(runs):
    for r, p, value, win in _each(runs, "gather"):
        check(value["y"], torch.cat([BASE + 100 * q for q in range(p)], dim=-1),
              f"{where(r, p)} gather_from_parallel_region forward",
              hint="all-gather and concatenate along the LAST dim in group-rank order")
        grad_y = torch.arange(6 * 4 * p, dtype=DTYPE).reshape(2, 3, 4 * p)
        what = f"{where(r, p)} gather_from_parallel_region: gradient of the input"
        _backward(value, what, hint="backward keeps slice r of the output gradient's last dim")
        check(value["x_grad"], grad_y[..., 4 * r:4 * (r + 1)], what,
              hint="backward keeps slice r of the output gradient")
        assert not win["gather backward"], (
            f"{where(r, p)} gather_from_parallel_region backward made "
            f"{describe(win['gather backward'])}; each rank already holds the whole gradient "
            f"of the replicated output")
