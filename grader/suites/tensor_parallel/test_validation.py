"""Construction and bad input, on 4 ranks: shapes and init of fresh layers (and the output of a
fresh MLP from its own random shards), ValueError for sizes the group size does not divide (6
features over 4 ranks: divisible by 2, not by 4), a row layer without bias, and a target whose
shape does not match the logits.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.tensor_parallel._cases import BACKEND, TIMEOUT_S
from grader.suites.tensor_parallel._ranks import build_linear, linear_step
from grader.suites.tensor_parallel._ref import check, dense_linear_case, shard
from harness.cases import case_values, launch_cases, run_cases, where

WORLD = 4
BAD = 6  # divisible by 2 but not by WORLD
BIASLESS = dense_linear_case(12, 8, False, 90)
# Inputs of freshly built layers, float32 like their parameters: [2, 3, 8] for the column layer
# and the MLP, [2, 3, 12] for the row layer (each rank passes its slice).
FRESH_X = torch.randn(2, 3, 8, generator=seeded_generator(91), dtype=torch.float32)
FRESH_WIDE = torch.randn(2, 3, 12, generator=seeded_generator(92), dtype=torch.float32)
BAD_CALLS = [
    "ColumnParallelLinear(8, 6)",
    "ColumnParallelLinear.from_dense(nn.Linear(8, 6))",
    "RowParallelLinear(6, 8)",
    "RowParallelLinear.from_dense(nn.Linear(6, 8))",
    "ParallelMLP(8, 6)",
    "ParallelMLP.from_dense(nn.Linear(8, 6), nn.Linear(6, 8))",
    "scatter_to_parallel_region(x of shape [2, 6])",
]


def _outcome(call) -> dict:
    """What `call()` raised: NotImplementedError passes through (the stub), others are caught
    (no collective is in flight while a layer is built)."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - any type is reported back to the parent
        return {"raised": type(exc).__name__, "message": str(exc)[:300]}
    return {"raised": None, "message": ""}


def _param(p: torch.Tensor | None) -> dict | None:
    if p is None:
        return None
    return {"shape": list(p.shape), "dtype": str(p.dtype), "is_parameter":
            isinstance(p, torch.nn.Parameter), "requires_grad": p.requires_grad,
            "max_abs": float(p.detach().abs().max()) if p.numel() else 0.0}


def rank_errors(ctx, biasless, fresh_x, fresh_wide) -> dict:
    tp = ctx.impl_module("tensor_parallel", "layers")
    r, p = ctx.rank, ctx.world_size

    def linear(in_f, out_f):
        return torch.nn.Linear(in_f, out_f, dtype=torch.float64)

    bad_calls = {
        BAD_CALLS[0]: lambda: tp.ColumnParallelLinear(8, BAD),
        BAD_CALLS[1]: lambda: tp.ColumnParallelLinear.from_dense(linear(8, BAD)),
        BAD_CALLS[2]: lambda: tp.RowParallelLinear(BAD, 8),
        BAD_CALLS[3]: lambda: tp.RowParallelLinear.from_dense(linear(BAD, 8)),
        BAD_CALLS[4]: lambda: tp.ParallelMLP(8, BAD),
        BAD_CALLS[5]: lambda: tp.ParallelMLP.from_dense(linear(8, BAD), linear(BAD, 8)),
        BAD_CALLS[6]: lambda: tp.scatter_to_parallel_region(torch.zeros(2, BAD)),
    }

    def constructors():
        column, column_nb = tp.ColumnParallelLinear(8, 12), tp.ColumnParallelLinear(8, 12, False)
        row, row_nb = tp.RowParallelLinear(12, 8), tp.RowParallelLinear(12, 8, bias=False)
        mlp, narrow = tp.ParallelMLP(8, 16), tp.ColumnParallelLinear(1, 64)
        return {name: {"weight": _param(layer.weight), "bias": _param(layer.bias)}
                for name, layer in (("ColumnParallelLinear(8, 12)", column),
                                    ("ColumnParallelLinear(8, 12, bias=False)", column_nb),
                                    ("ColumnParallelLinear(1, 64)", narrow),
                                    ("RowParallelLinear(12, 8)", row),
                                    ("RowParallelLinear(12, 8, bias=False)", row_nb),
                                    ("ParallelMLP(8, 16).up", mlp.up),
                                    ("ParallelMLP(8, 16).down", mlp.down))}

    def fresh_layers():
        # Built with their default arguments: the column layer keeps its output slice, the row
        # layer takes its input slice.
        column, row = tp.ColumnParallelLinear(8, 12), tp.RowParallelLinear(12, 8)
        mlp = tp.ParallelMLP(8, 16)
        out = {"column y": column(fresh_x), "row y": row(shard(fresh_wide, r, p)),
               "mlp y": mlp(fresh_x)}
        for name, layer in (("column", column), ("row", row), ("up", mlp.up),
                            ("down", mlp.down)):
            out[f"{name}.weight"], out[f"{name}.bias"] = layer.weight, layer.bias
        return {key: value.detach() for key, value in out.items()}

    def biasless_row():
        layer = tp.RowParallelLinear.from_dense(build_linear(biasless["state"]))
        return {"bias": layer.bias, **linear_step(layer, shard(biasless["x"], r, p),
                                                  biasless["grad_y"])}

    def bad_target():
        logits = torch.zeros(3, 5, 2, dtype=torch.float64)
        return _outcome(lambda: tp.vocab_parallel_cross_entropy(
            logits, torch.zeros(3, dtype=torch.int64)))

    parts = [("constructors", constructors), ("fresh layers", fresh_layers),
             ("biasless row", biasless_row),
             ("bad target", bad_target)]
    parts += [(name, lambda c=call: _outcome(c)) for name, call in bad_calls.items()]
    return run_cases(ctx, parts)


@pytest.fixture(scope="module")
def run(launch):
    biasless = {key: BIASLESS[key] for key in ("state", "x", "grad_y")}  # not the expected
    # A part that hangs costs only itself (harness.cases.launch_cases).
    names = ["constructors", "fresh layers", "biasless row", "bad target", *BAD_CALLS]
    return launch_cases(lambda env: launch(
        rank_errors, world_size=WORLD, args=(biasless, FRESH_X, FRESH_WIDE), backend=BACKEND,
        timeout=TIMEOUT_S, env=env), names).values


EXPECTED_SHAPES = {
    "ColumnParallelLinear(8, 12)": ([3, 8], [3], 8),
    "ColumnParallelLinear(8, 12, bias=False)": ([3, 8], None, 8),
    "ColumnParallelLinear(1, 64)": ([16, 1], [16], 1),
    "RowParallelLinear(12, 8)": ([8, 3], [8], 12),
    "RowParallelLinear(12, 8, bias=False)": ([8, 3], None, 12),
    "ParallelMLP(8, 16).up": ([4, 8], [4], 8),
    "ParallelMLP(8, 16).down": ([8, 4], [8], 16),
}


@pytest.mark.exercises("ColumnParallelLinear", "RowParallelLinear", "ParallelMLP")
@pytest.mark.points(2)
def test_constructors_make_shards(run):
    for r, value in enumerate(case_values(run, "constructors")):
        for name, (weight_shape, bias_shape, fan_in) in EXPECTED_SHAPES.items():
            what = f"{where(r, WORLD)} {name}"
            for attr, shape in (("weight", weight_shape), ("bias", bias_shape)):
                got = value[name][attr]
                if shape is None:
                    assert got is None, f"{what}.{attr}: expected None (bias=False), got {got}"
                    continue
                assert got is not None and got["shape"] == shape, (
                    f"{what}.{attr}: shape {got and got['shape']}, expected {shape} on each of "
                    f"{WORLD} ranks")
                assert got["is_parameter"] and got["requires_grad"], (
                    f"{what}.{attr} must be an nn.Parameter that requires grad")
                assert got["dtype"] == "torch.float32", f"{what}.{attr}: dtype {got['dtype']}, " \
                                                        f"expected torch.float32"
                bound = 1 / math.sqrt(fan_in)
                assert got["max_abs"] <= bound + 1e-6, (
                    f"{what}.{attr}: |value| up to {got['max_abs']:.3g}; nn.Linear's init "
                    f"draws from U(-1/sqrt(in_features), 1/sqrt(in_features)), bound {bound:.3g}")
                # 16 or more draws all below bound/4: probability at most 4**-16.
                if math.prod(shape) >= 16:
                    assert got["max_abs"] >= bound / 4, (
                        f"{what}.{attr}: every |value| is at most {got['max_abs']:.3g}, far "
                        f"inside the bound {bound:.3g}; draw from U(-1/sqrt(in_features), "
                        f"1/sqrt(in_features)), also when in_features is 1")
    _check_fresh_layers(run)


def _check_fresh_layers(run) -> None:
    """Fresh layers, built with their default arguments, compute the dense layers whose weights
    are their ranks' shards put together (each rank adds its own replicated bias: every rank
    draws its own)."""
    values = case_values(run, "fresh layers")

    def whole(key: str, dim: int) -> torch.Tensor:
        return torch.cat([value[key] for value in values], dim=dim).double()

    hidden = F.gelu(F.linear(FRESH_X.double(), whole("up.weight", 0), whole("up.bias", 0)))
    row_partial = F.linear(FRESH_WIDE.double(), whole("row.weight", 1))
    mlp_partial = F.linear(hidden, whole("down.weight", 1))
    for r, value in enumerate(values):
        column = F.linear(FRESH_X.double(), value["column.weight"].double(),
                          value["column.bias"].double())
        expected = {
            "column y": (column, "ColumnParallelLinear(8, 12)",
                         "by default (gather_output=False) each rank returns its output slice"),
            "row y": (row_partial + value["row.bias"].double(), "RowParallelLinear(12, 8)",
                      "by default (input_is_parallel=True) the input is this rank's slice"),
            "mlp y": (mlp_partial + value["down.bias"].double(), "ParallelMLP(8, 16)",
                      "up is ColumnParallelLinear(gather_output=False), down "
                      "RowParallelLinear(input_is_parallel=True), exact GELU between them"),
        }
        for key, (reference, name, hint) in expected.items():
            assert_close(value[key], reference, dtype=torch.float32, hint=hint, hint_first=True,
                         what=f"{where(r, WORLD)} fresh {name} output from its own random shards")


@pytest.mark.exercises("ColumnParallelLinear", "RowParallelLinear", "ParallelMLP",
                        "scatter_to_parallel_region")
@pytest.mark.points(3)
def test_non_divisible_sizes_raise_value_error(run):
    for name in BAD_CALLS:
        for r, outcome in enumerate(case_values(run, name)):
            what = f"{where(r, WORLD)} {name}"
            assert outcome["raised"] == "ValueError", (
                f"{what} raised {outcome['raised'] or 'nothing'}; {BAD} is not divisible by "
                f"the group size {WORLD}: raise ValueError naming both sizes")
            message = outcome["message"]
            named = all(re.search(rf"\b{n}\b", message) for n in (BAD, WORLD))
            assert named, (f"{what}: the ValueError message should name the size ({BAD}) and "
                           f"the group size ({WORLD}); got {message!r}")


@pytest.mark.exercises("RowParallelLinear")
@pytest.mark.points(2)
def test_row_layer_without_bias(run):
    for r, value in enumerate(case_values(run, "biasless row")):
        what = f"{where(r, WORLD)} RowParallelLinear.from_dense(nn.Linear(12, 8, bias=False))"
        check(value["bias"], None, f"{what}.bias")
        check(value["y"], BIASLESS["expected"]["y"], f"{what}: output")
        check(value["x_grad"], shard(BIASLESS["expected"]["x_grad"], r, WORLD),
              f"{what}: input gradient")
        check(value["weight_grad"], shard(BIASLESS["expected"]["weight_grad"], r, WORLD, dim=1),
              f"{what}: weight gradient")


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(1)
def test_cross_entropy_rejects_mismatched_target(run):
    for r, outcome in enumerate(case_values(run, "bad target")):
        assert outcome["raised"] == "ValueError", (
            f"{where(r, WORLD)} vocab_parallel_cross_entropy(logits [3, 5, 2], target [3]) "
            f"raised {outcome['raised'] or 'nothing'}; expected ValueError (target must be "
            f"logits' shape without the last dim)")
