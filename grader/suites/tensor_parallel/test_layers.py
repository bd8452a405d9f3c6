"""ColumnParallelLinear and RowParallelLinear against the dense nn.Linear they came from.

The parent builds each dense layer from a seed, runs it forward and backward with plain torch,
and sends its weights to 1, 2 and 4 ranks. Each rank shards the layer with `from_dense`, runs the
same input and upstream gradient, and returns its output, the input gradient and the parameter
gradients, which must equal the matching slices of the dense ones. Every combination of bias
on/off with gather_output (column) or input_is_parallel (row) is covered. The shards must be
copies: bytes held, and values unchanged when the dense layer is overwritten after from_dense.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from grader.suites.tensor_parallel._cases import BACKEND, TIMEOUT_S, inputs_only
from grader.suites.tensor_parallel._ranks import build_linear, linear_step
from grader.suites.tensor_parallel._ref import check, dense_linear_case, shard
from harness.cases import case_values, launch_cases, run_cases, where

WORLDS = (1, 2, 4)
NARROW, WIDE = 8, 12
COLUMN_CASES = [{"bias": b, "gather_output": g, "seed": 10 + i}
                for i, (b, g) in enumerate(itertools.product((True, False), (False, True)))]
ROW_CASES = [{"bias": b, "input_is_parallel": q, "seed": 20 + i}
             for i, (b, q) in enumerate(itertools.product((True, False), (True, False)))]


def _name(kind: str, case: dict) -> str:
    option = "gather_output" if kind == "column" else "input_is_parallel"
    return f"{kind}(bias={case['bias']}, {option}={case[option]})"


def _inputs(kind: str, case: dict) -> dict:
    """Dense layer, input, upstream gradient and the dense results of one case."""
    in_f, out_f = (NARROW, WIDE) if kind == "column" else (WIDE, NARROW)
    return dense_linear_case(in_f, out_f, case["bias"], case["seed"])


INPUTS = {_name(kind, case): _inputs(kind, case)
          for kind, cases in (("column", COLUMN_CASES), ("row", ROW_CASES)) for case in cases}


def rank_layers(ctx, column_cases, row_cases, inputs) -> dict:
    from harness import storage_bytes

    tp = ctx.impl_module("tensor_parallel", "layers")
    r, p = ctx.rank, ctx.world_size

    layers = {}  # name -> the sharded layer its "built" part made

    def build(name, layer):
        layers[name] = layer
        params = {"weight": layer.weight.detach().clone(),
                  "bias": None if layer.bias is None else layer.bias.detach().clone()}
        return {"params": params, "bytes": storage_bytes(layer)}

    def copies(make_from, state):
        # Overwrite the dense layer after from_dense: a copy keeps its values, a view follows.
        linear = build_linear(state)
        layer = make_from(linear)
        before = {name: t.detach().clone() for name, t in (("weight", layer.weight),
                                                             ("bias", layer.bias))
                  if t is not None}
        with torch.no_grad():
            for t in linear.parameters():
                t.fill_(1e3)
        return [name for name, t in before.items()
                if not torch.equal(getattr(layer, name).detach(), t)]

    def run(name, make, x, grad_y):
        # When the "built" part failed, building again raises the same error here (a stub's
        # NotImplementedError included), so this part is graded like that one.
        return linear_step(layers[name] if name in layers else make(), x, grad_y)

    parts = []
    for case in column_cases:
        name, data = _name("column", case), inputs[_name("column", case)]
        grad_y = data["grad_y"] if case["gather_output"] else shard(data["grad_y"], r, p)
        make = (lambda c=case, d=data: tp.ColumnParallelLinear.from_dense(
            build_linear(d["state"]), gather_output=c["gather_output"]))
        parts.append((f"{name} built", lambda n=name, m=make: build(n, m())))
        parts.append((name, lambda n=name, m=make, d=data, g=grad_y: run(n, m, d["x"], g)))
        parts.append((f"{name} copies", lambda c=case, d=data: copies(
            lambda linear: tp.ColumnParallelLinear.from_dense(
                linear, gather_output=c["gather_output"]), d["state"])))
    for case in row_cases:
        name, data = _name("row", case), inputs[_name("row", case)]
        x = shard(data["x"], r, p) if case["input_is_parallel"] else data["x"]
        make = (lambda c=case, d=data: tp.RowParallelLinear.from_dense(
            build_linear(d["state"]), input_is_parallel=c["input_is_parallel"]))
        parts.append((f"{name} built", lambda n=name, m=make: build(n, m())))
        parts.append((name, lambda n=name, m=make, d=data, x=x: run(n, m, x, d["grad_y"])))
        parts.append((f"{name} copies", lambda c=case, d=data: copies(
            lambda linear: tp.RowParallelLinear.from_dense(
                linear, input_is_parallel=c["input_is_parallel"]), d["state"])))
    return run_cases(ctx, parts)


@pytest.fixture(scope="module")
def runs(launch):
    # A part that hangs costs only itself (harness.cases.launch_cases).
    names = [part for kind, cases in (("column", COLUMN_CASES), ("row", ROW_CASES))
             for case in cases
             for part in (f"{_name(kind, case)} built", _name(kind, case),
                          f"{_name(kind, case)} copies")]
    return {p: launch_cases(lambda env, p=p: launch(
        rank_layers, world_size=p, args=inputs_only((COLUMN_CASES, ROW_CASES, INPUTS)),
        backend=BACKEND, timeout=TIMEOUT_S, env=env), names).values for p in WORLDS}


def _each(runs, kind, select, stage=""):
    """(rank, world, case name, rank value, dense inputs+results) of the selected cases;
    stage "built" reads the parameters right after from_dense, "copies" the names of those that
    followed a later write to the dense layer, "" the forward/backward run."""
    cases = COLUMN_CASES if kind == "column" else ROW_CASES
    for case in filter(select, cases):
        name = _name(kind, case)
        for p, values in runs.items():
            for r, value in enumerate(case_values(values, f"{name} {stage}".strip())):
                yield r, p, name, value, INPUTS[name]


def _plain_column(case):
    return not case["gather_output"]


def _plain_row(case):
    return case["input_is_parallel"]


# ---- column-parallel -----------------------------------------------------------------------------

@pytest.mark.exercises("ColumnParallelLinear")
@pytest.mark.points(2)
def test_column_parameters_are_row_slices(runs):
    for r, p, name, value, data in _each(runs, "column", lambda c: True, "built"):
        state = data["state"]
        check(value["params"]["weight"], shard(state["weight"], r, p, dim=0),
              f"{where(r, p)} {name}.from_dense: weight",
              hint="keep rows slice r of the dense weight [out, in] (output features)")
        check(value["params"]["bias"], shard(state["bias"], r, p),
              f"{where(r, p)} {name}.from_dense: bias", hint="keep slice r of the dense bias")


@pytest.mark.exercises("ColumnParallelLinear")
@pytest.mark.points(3)
def test_column_forward(runs):
    for r, p, name, value, data in _each(runs, "column", _plain_column):
        check(value["y"], shard(data["expected"]["y"], r, p), f"{where(r, p)} {name}: output",
              hint="each rank returns its slice r of the output features")


@pytest.mark.exercises("ColumnParallelLinear")
@pytest.mark.points(3)
def test_column_backward(runs):
    for r, p, name, value, data in _each(runs, "column", _plain_column):
        expected = data["expected"]
        check(value["x_grad"], expected["x_grad"], f"{where(r, p)} {name}: input gradient",
              hint="the input is replicated: sum its gradient over the group (f)")
        check(value["weight_grad"], shard(expected["weight_grad"], r, p, dim=0),
              f"{where(r, p)} {name}: weight gradient")
        check(value["bias_grad"], shard(expected["bias_grad"], r, p),
              f"{where(r, p)} {name}: bias gradient")


@pytest.mark.exercises("ColumnParallelLinear")
@pytest.mark.points(2)
def test_column_gather_output(runs):
    for r, p, name, value, data in _each(runs, "column", lambda c: c["gather_output"]):
        expected = data["expected"]
        check(value["y"], expected["y"], f"{where(r, p)} {name}: output",
              hint="gather_output=True all-gathers the slices along the last dim in rank order")
        check(value["x_grad"], expected["x_grad"], f"{where(r, p)} {name}: input gradient")
        check(value["weight_grad"], shard(expected["weight_grad"], r, p, dim=0),
              f"{where(r, p)} {name}: weight gradient",
              hint="the gather's backward keeps only this rank's slice of the gradient")


# ---- row-parallel --------------------------------------------------------------------------------

@pytest.mark.exercises("RowParallelLinear")
@pytest.mark.points(2)
def test_row_parameters_are_column_slices(runs):
    for r, p, name, value, data in _each(runs, "row", lambda c: True, "built"):
        state = data["state"]
        check(value["params"]["weight"], shard(state["weight"], r, p, dim=1),
              f"{where(r, p)} {name}.from_dense: weight",
              hint="keep columns slice r of the dense weight [out, in] (input features)")
        check(value["params"]["bias"], state["bias"], f"{where(r, p)} {name}.from_dense: bias",
              hint="a row-parallel layer keeps the WHOLE bias on every rank")


@pytest.mark.exercises("RowParallelLinear")
@pytest.mark.points(3)
def test_row_forward(runs):
    for r, p, name, value, data in _each(runs, "row", _plain_row):
        check(value["y"], data["expected"]["y"], f"{where(r, p)} {name}: output",
              hint="all-reduce the partial products, then add the bias once")


@pytest.mark.exercises("RowParallelLinear")
@pytest.mark.points(3)
def test_row_backward(runs):
    for r, p, name, value, data in _each(runs, "row", _plain_row):
        expected = data["expected"]
        check(value["x_grad"], shard(expected["x_grad"], r, p),
              f"{where(r, p)} {name}: input gradient",
              hint="the gradient of the all-reduce's input is its output gradient (g)")
        check(value["weight_grad"], shard(expected["weight_grad"], r, p, dim=1),
              f"{where(r, p)} {name}: weight gradient")
        check(value["bias_grad"], expected["bias_grad"], f"{where(r, p)} {name}: bias gradient")


@pytest.mark.exercises("RowParallelLinear")
@pytest.mark.points(2)
def test_row_input_not_parallel(runs):
    for r, p, name, value, data in _each(runs, "row", lambda c: not c["input_is_parallel"]):
        expected = data["expected"]
        check(value["y"], expected["y"], f"{where(r, p)} {name}: output",
              hint="input_is_parallel=False: keep slice r of the input's last dim first")
        check(value["x_grad"], expected["x_grad"], f"{where(r, p)} {name}: input gradient",
              hint="the scatter's backward all-gathers the gradient slices")


# ---- memory --------------------------------------------------------------------------------------

@pytest.mark.exercises("ColumnParallelLinear", "RowParallelLinear")
@pytest.mark.points(2)
def test_sharded_layers_hold_one_slice_of_the_weights(runs):
    for kind in ("column", "row"):
        for r, p, name, value, data in _each(runs, kind, lambda c: True, "built"):
            weight, bias = data["state"]["weight"], data["state"]["bias"]
            size = weight.element_size()
            expected = weight.numel() // p * size
            if bias is not None:
                expected += (bias.numel() // p if kind == "column" else bias.numel()) * size
            assert value["bytes"] <= expected, (
                f"{where(r, p)} {name}.from_dense holds {value['bytes']} bytes of tensors; "
                f"its shard needs {expected}. Copy the slice (.clone()): a slice of the dense "
                f"weight is a view that keeps the whole dense storage alive")
        for r, p, name, changed, _ in _each(runs, kind, lambda c: True, "copies"):
            assert not changed, (
                f"{where(r, p)} {name}.from_dense: its {' and '.join(changed)} changed when the "
                f"dense layer was overwritten afterwards. Copy the slice (.clone()): the shard "
                f"must not be a view of the dense layer's storage")
