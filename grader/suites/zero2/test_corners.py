"""Documented corners of the API, on 2 ranks, each in its own case of one launch.

- a model with a single trainable element (P = 1: S = 1, rank 1's shard is all padding);
- `zero_grad(set_to_none=False)` (the gradient shard is zeroed, not kept);
- a backward whose gradients are thrown away by `zero_grad()` before the real one;
- gradients written into `.grad` by hand (no backward, so no hook runs);
- `clip_grad_norm_` with a max_norm above the norm (the scale is min(1, ...): nothing changes);
- the master copy's dtype: float32 for float32 and bfloat16 parameters;
- `load_state_dict` into an optimizer built before the model's weights were restored;
- `consolidated_state_dict()` with its default dst = 0.
Each trained case must equal the single-process run of the same spec.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.zero2._cases import LAUNCH_TIMEOUT, TWO_GROUPS, make_data, rank_slices
from grader.suites.zero2._ranks import (
    build_model,
    loss_fn,
    make_optimizer,
    round_trip,
    snapshot,
    train,
)
from grader.suites.zero2._ref import assert_history, reference_run
from harness.cases import case_values, launch_cases, run_cases, where

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")

WORLD = 2
COMMON = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 3,
          "batch": 2, "clip": None, "groups": TWO_GROUPS, "optimizer": "adamw",
          "defaults": {"lr": 1e-2}}
ALL_BUT_SCALE = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight", "head.bias"]
SPECS = {
    "plain": dict(COMMON, seed=61),
    "one element": dict(COMMON, seed=62, frozen=ALL_BUT_SCALE, groups=None),
    "loose clip": dict(COMMON, seed=63, clip=1e3),
}


def _loop(ctx, spec, x, y, *, zero_grad, grads):
    """Train spec's steps, clearing with `zero_grad(opt)` and filling gradients with
    `grads(model, step)`; returns the parameters after each step."""
    model = build_model(spec)
    opt = make_optimizer(ctx, spec, model)
    history = []
    for step in range(spec["steps"]):
        zero_grad(opt)
        grads(model, step)
        opt.step()
        history.append(snapshot(model))
    return {"history": history}


CORNERS = ("one element", "keep grads", "discarded backward", "grads by hand", "loose clip",
           "master dtype", "load before weights", "default dst")  # rank_corners' cases


def rank_corners(ctx, specs, data):
    def backward(model, step):
        loss_fn(model(data["plain"][0][step]), data["plain"][1][step]).backward()

    def discarded(model, step):
        opt_zero = ctx_state["opt"]
        loss_fn(model(data["plain"][0][step]), -2 * data["plain"][1][step]).backward()
        opt_zero.zero_grad()
        backward(model, step)

    def by_hand(model, step):
        trainable = [p for p in model.parameters() if p.requires_grad]
        loss = loss_fn(model(data["plain"][0][step]), data["plain"][1][step])
        for p, g in zip(trainable, torch.autograd.grad(loss, trainable)):
            p.grad = g

    ctx_state = {}

    def remember(opt):
        ctx_state["opt"] = opt
        opt.zero_grad()

    def trained(name):
        spec = specs[name]
        model = build_model(spec)
        return train(ctx, spec, model, make_optimizer(ctx, spec, model), *data[name],
                     range(spec["steps"]))

    def master_dtypes():
        out = {}
        for dtype in ("float32", "bfloat16"):
            spec = dict(specs["plain"], dtype=dtype)
            opt = make_optimizer(ctx, spec, build_model(spec))
            out[dtype] = sorted({str(p.dtype) for g in opt.inner.param_groups
                                 for p in g["params"]})
        return out

    def load_before_weights():
        spec = specs["plain"]
        x, y = data["plain"]
        model = build_model(spec)
        opt = make_optimizer(ctx, spec, model)
        out = train(ctx, spec, model, opt, x, y, range(2))
        saved = round_trip(opt.state_dict()), round_trip(model.state_dict())
        fresh = build_model(dict(spec, seed=spec["seed"] + 1000))  # other weights until loaded
        resumed = make_optimizer(ctx, spec, fresh)  # built first, as torch code often does
        fresh.load_state_dict(saved[1])
        resumed.load_state_dict(saved[0])
        out["history"] += train(ctx, spec, fresh, resumed, x, y, range(2, 3))["history"]
        return out

    def default_dst():
        spec = specs["plain"]
        model = build_model(spec)
        opt = make_optimizer(ctx, spec, model)
        train(ctx, spec, model, opt, *data["plain"], range(1))
        return {"is_none": opt.consolidated_state_dict() is None}

    plain = specs["plain"]
    return run_cases(ctx, [  # in the order of CORNERS
        ("one element", lambda: trained("one element")),
        ("keep grads", lambda: _loop(ctx, plain, *data["plain"],
                                     zero_grad=lambda o: o.zero_grad(set_to_none=False),
                                     grads=backward)),
        ("discarded backward", lambda: _loop(ctx, plain, *data["plain"], zero_grad=remember,
                                             grads=discarded)),
        ("grads by hand", lambda: _loop(ctx, plain, *data["plain"],
                                        zero_grad=lambda o: o.zero_grad(), grads=by_hand)),
        ("loose clip", lambda: trained("loose clip")),
        ("master dtype", master_dtypes),
        ("load before weights", load_before_weights),
        ("default dst", default_dst),
    ])


@pytest.fixture(scope="module")
def run(launch):
    data = {name: make_data(spec, WORLD) for name, spec in SPECS.items()}
    per_rank = [{name: rank_slices(x, y, WORLD)[r] for name, (x, y) in data.items()}
                for r in range(WORLD)]
    # A case that hangs costs only itself (harness.cases.launch_cases).
    values = launch_cases(lambda env: launch(
        rank_corners, world_size=WORLD, args=(SPECS,), rank_args=[(d,) for d in per_rank],
        timeout=LAUNCH_TIMEOUT, env=env), CORNERS).values
    refs = {name: reference_run(spec, *data[name]) for name, spec in SPECS.items()}
    return values, refs


def _history(run, case, spec_name, hint):
    values, refs = run
    assert_history(case_values(values, case), refs[spec_name], WORLD, hint=hint,
                   spec=SPECS[spec_name])


@pytest.mark.points(1)
def test_one_trainable_element(run):
    _history(run, "one element", "one element",
             "one trainable element: S = 1, and rank 1's shard is all padding")


@pytest.mark.points(1)
def test_zero_grad_without_set_to_none(run):
    _history(run, "keep grads", "plain",
             "zero_grad(set_to_none=False) must zero the gradient shard too")


@pytest.mark.points(1)
def test_zero_grad_discards_a_backward(run):
    _history(run, "discarded backward", "plain",
             "zero_grad() forgets every gradient of the backward before it, also reductions "
             "already in flight")


@pytest.mark.points(1)
def test_gradients_set_by_hand(run):
    _history(run, "grads by hand", "plain",
             "step() averages whatever gradient the parameters' .grad hold, also one set by "
             "hand without backward (no hook ran)")


@pytest.mark.points(1)
def test_clip_above_the_norm_changes_nothing(run):
    _history(run, "loose clip", "loose clip",
             "clip_grad_norm_ scales by min(1, max_norm / (norm + 1e-6)): never up")


@pytest.mark.points(1)
def test_master_is_float32(run):
    values, _ = run
    for rank, value in enumerate(case_values(values, "master dtype")):
        for dtype, got in value.items():
            assert got == ["torch.float32"], (
                f"{where(rank, WORLD)} with {dtype} parameters the inner optimizer's parameters "
                f"(the master shard) are {got}; the master copy is float32 (float64 only for "
                f"float64 parameters)")


@pytest.mark.points(1)
def test_checkpoint_corners(run):
    """load_state_dict into an optimizer built before the weights; consolidated_state_dict()
    with its default dst."""
    values, refs = run
    for rank, value in enumerate(case_values(values, "default dst")):
        assert value["is_none"] == (rank != 0), (
            f"{where(rank, WORLD)} consolidated_state_dict() returned "
            f"{'None' if value['is_none'] else 'a dict'}; its default dst is group rank 0")
    assert_history(case_values(values, "load before weights"), refs["plain"], WORLD,
                   hint="load_state_dict restores the master shard from the state, also in an "
                        "optimizer built before the model's weights were loaded",
                   spec=SPECS["plain"])
