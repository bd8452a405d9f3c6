"""`flatten_pad` on other shapes, dtypes and world sizes, and the ValueErrors of `flatten_pad`
and `Zero3`: one launch of one rank, each case in its own error scope."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from torch import nn

from grader.compare import assert_close, steps_bound
from grader.seeds import seeded_generator
from grader.suites.fsdp._cases import LAUNCH_TIMEOUT, MEMO
from harness.cases import case_value, run_cases

SHAPES: dict[str, tuple[list[tuple[int, ...]], int]] = {  # name: (tensor shapes, world size)
    "ragged-N=4": ([(3, 4), (5,), (1,)], 4), "N=1": ([(2, 3), (7,)], 1),
    "N=3-float64": ([(4, 4), (2,)], 3), "only-padding": ([(1,)], 5)}


def inputs(name: str) -> list[torch.Tensor]:
    shapes, _ = SHAPES[name]
    gen = seeded_generator(31 + sorted(SHAPES).index(name))
    dtype = torch.float64 if "float64" in name else torch.float32
    return [torch.randn(*s, generator=gen, dtype=dtype) for s in shapes]


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)
        self.c = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


ACC_SEED = 41


def accumulate_inputs() -> list[torch.Tensor]:
    gen = seeded_generator(ACC_SEED)
    return [torch.randn(3, 2, generator=gen, dtype=torch.float64) for _ in range(2)]


def accumulated_reference() -> list[torch.Tensor]:
    """The flat gradient of each unit (a, b, c) after two backwards without zero_grad."""
    torch.manual_seed(ACC_SEED)
    model = Pair().to(torch.float64)
    for x in accumulate_inputs():
        model(x).pow(2).mean().backward()
    return [torch.cat([cast(torch.Tensor, p.grad).reshape(-1) for p in unit.parameters()])
            for unit in (model.a, model.b, model.c)]


def error_of(fn) -> str:
    """The type and message of what `fn()` raised, or "returned" (suite code, in the rank)."""
    try:
        fn()
    except NotImplementedError:
        raise  # a stub is "not implemented", not a wrong error type
    except Exception as exc:  # noqa: BLE001 - the type is what the test judges
        return f"{type(exc).__name__}: {exc}"
    return "returned"


def rank_basics(ctx, cases: dict) -> dict:
    zero3 = ctx.impl_module("fsdp", "zero3")

    def flat(name: str) -> dict:
        tensors = [t.clone().requires_grad_() for t in cases[name]["tensors"]]
        out = zero3.flatten_pad(tensors, cases[name]["world"])
        shares = any(out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
                     for t in tensors)
        return {"out": out.detach().clone(), "requires_grad": out.requires_grad,
                "shares": shares}

    def flat_errors() -> dict:
        a, b = torch.ones(3), torch.ones(2, dtype=torch.float64)
        meta = torch.ones(2, device="meta")
        return {"world=0": error_of(lambda: zero3.flatten_pad([a], 0)),
                "dtypes": error_of(lambda: zero3.flatten_pad([a, b], 2)),
                "devices": error_of(lambda: zero3.flatten_pad([a, meta], 2)),
                "empty": list(zero3.flatten_pad([], 2).shape)}

    def unit_errors() -> dict:
        def build(units) -> None:
            model = Pair()
            zero3.Zero3(model, units(model))
        return {"outside": error_of(lambda: build(lambda m: [m.a, m.b])),
                "nested": error_of(lambda: build(lambda m: [m, m.a])),
                "nested-reversed": error_of(lambda: build(lambda m: [m.a, m])),
                "foreign": error_of(lambda: build(lambda m: [m.a, m.b, m.c, nn.Linear(2, 2)]))}

    def accumulate() -> list:
        torch.manual_seed(ACC_SEED)
        model = Pair().to(torch.float64)
        wrapped = zero3.Zero3(model, [model.a, model.b, model.c])
        for x in accumulate_inputs():
            wrapped(x).pow(2).mean().backward()
        return [None if p.grad is None else p.grad.detach().clone() for p in wrapped.shards]

    named = [(f"flat {name}", lambda name=name: flat(name)) for name in cases]
    return run_cases(ctx, named + [("flat errors", flat_errors), ("unit errors", unit_errors),
                                   ("accumulate", accumulate)])


@pytest.fixture(scope="module")
def outcomes(launch, impl) -> dict:
    cases = {name: {"tensors": inputs(name), "world": SHAPES[name][1]} for name in SHAPES}

    def make():
        return launch(rank_basics, 1, args=(cases,), timeout=MEMO.timeout(LAUNCH_TIMEOUT))
    return MEMO.get(("basics", impl), make).values[0]


@pytest.mark.points(2)
@pytest.mark.exercises("flatten_pad")
def test_flatten_pad_values(outcomes):
    for name, (_, world) in SHAPES.items():
        got = case_value(outcomes[f"flat {name}"], f"flatten_pad ({name})")
        tensors = inputs(name)
        numel = sum(t.numel() for t in tensors)
        shard = -(-numel // world)
        expected = torch.cat([t.reshape(-1) for t in tensors] +
                             [tensors[0].new_zeros(world * shard - numel)])
        out = got["out"]
        assert out.dtype == expected.dtype and out.shape == expected.shape, (
            f"flatten_pad ({name}, N={world}): {out.dtype} {list(out.shape)}, expected "
            f"{expected.dtype} [{world * shard}] (N x ceil(P/N), P = {numel})")
        assert torch.equal(out, expected), (
            f"flatten_pad ({name}, N={world}): the tensors flattened in order, then zeros up to "
            f"N x S; got {out[:6].tolist()}...")
        assert not got["requires_grad"] and not got["shares"], (
            f"flatten_pad ({name}): return a new tensor without autograd history, not a view "
            f"of an input")


@pytest.mark.points(1)
@pytest.mark.exercises("flatten_pad")
def test_flatten_pad_errors(outcomes):
    got = case_value(outcomes["flat errors"], "flatten_pad (bad input)")
    for case in ("world=0", "dtypes", "devices"):
        assert got[case].startswith("ValueError"), (
            f"flatten_pad ({case}): expected ValueError, got {got[case]}")
    assert "float32" in got["dtypes"] and "float64" in got["dtypes"], (
        f"flatten_pad's dtype error must name both dtypes: {got['dtypes']}")
    assert got["empty"] == [0], f"flatten_pad([], 2) has shape {got['empty']}, expected [0]"


@pytest.mark.points(2)
@pytest.mark.exercises("Zero3")
def test_zero3_rejects_bad_units(outcomes):
    got = case_value(outcomes["unit errors"], "Zero3 (bad units)")
    what = {"outside": "a parameter in no unit (c.weight)",
            "nested": "units that contain one another",
            "nested-reversed": "units that contain one another (inner first)",
            "foreign": "a unit outside the module"}
    for case, text in what.items():
        assert got[case].startswith("ValueError"), (
            f"Zero3 with {text}: expected ValueError, got {got[case]}")
    assert "c.weight" in got["outside"] or "c.bias" in got["outside"], (
        f"Zero3's error for a parameter in no unit must name it: {got['outside']}")


@pytest.mark.points(1)
@pytest.mark.exercises("Zero3")
def test_zero3_accumulates_gradients(outcomes):
    """Two backwards without zero_grad (1 rank): each shard's .grad is the sum of both."""
    got = case_value(outcomes["accumulate"], "Zero3 (two backwards)")
    tol = steps_bound(torch.float64, steps=2, depth_per_step=64)
    for unit, (grad, expected) in enumerate(zip(got, accumulated_reference())):
        assert grad is not None, f"Zero3 unit {unit}: no .grad on the shard after backward"
        assert_close(grad[:expected.numel()], expected, tol=tol, hint_first=True,
                     what=f"Zero3 unit {unit} shard .grad after two backwards",
                     hint="add each reduce-scattered gradient to the shard's existing .grad")
