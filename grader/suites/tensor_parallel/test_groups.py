"""Two independent tensor-parallel groups of 2 inside 4 ranks: [0, 1] and [2, 3].

Each group shards its own dense layers (different weights and inputs), so a layer that slices by
the global rank, or communicates over the default group, gets the other group's numbers or the
wrong slice. The MLP's all-reduces must stay inside the group (read from the harness log).
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.tensor_parallel._cases import (
    ALL_REDUCE_OPS,
    BACKEND,
    TIMEOUT_S,
    TRANSPORT,
    inputs_only,
)
from grader.suites.tensor_parallel._ranks import build_linear, leaf, linear_step
from grader.suites.tensor_parallel._ref import (
    check,
    comm_windows,
    dense_cross_entropy,
    dense_linear,
    dense_linear_run,
    dense_mlp_run,
    describe,
    linear_state,
    randn,
    shard,
)
from harness.cases import case_values, launch_cases, run_cases
from harness.errors import NotImplementedInRank

WORLD, TP = 4, 2
GROUPS = ([0, 1], [2, 3])
HIDDEN, FFN, VOCAB = 8, 16, 12


def _group_data(seed: int) -> dict:
    column = dense_linear(HIDDEN, FFN, True, seed)
    row = dense_linear(FFN, HIDDEN, True, seed + 1)
    up, down = dense_linear(HIDDEN, FFN, True, seed + 2), dense_linear(FFN, HIDDEN, True, seed + 3)
    x, x_wide = randn(seed + 4, 2, 3, HIDDEN), randn(seed + 5, 2, 3, FFN)
    grad_narrow, grad_wide = randn(seed + 6, 2, 3, HIDDEN), randn(seed + 7, 2, 3, FFN)
    logits = randn(seed + 8, 2, 3, VOCAB) * 4
    target = _targets(seed)
    weight = randn(seed + 9, 2, 3)
    loss, logits_grad = dense_cross_entropy(logits, target, weight)
    return {
        "column": linear_state(column), "row": linear_state(row),
        "up": linear_state(up), "down": linear_state(down),
        "x": x, "x_wide": x_wide, "grad_narrow": grad_narrow, "grad_wide": grad_wide,
        "logits": logits, "target": target, "weight": weight,
        "expected": {
            "column": dense_linear_run(column, x, grad_wide),
            "row": dense_linear_run(row, x_wide, grad_narrow),
            "mlp": dense_mlp_run(up, down, x, grad_narrow),
            "ce": {"loss": loss, "grad": logits_grad},
        },
    }


def _targets(seed: int) -> torch.Tensor:
    """Six targets over both halves of the vocabulary, different per group."""
    ids = [(seed + 5 * i) % VOCAB for i in range(6)]
    return torch.tensor(ids, dtype=torch.int64).reshape(2, 3)


DATA = [_group_data(70), _group_data(80)]


def rank_groups(ctx, data) -> dict:
    tp = ctx.impl_module("tensor_parallel", "layers")
    groups = [ctx.new_group(ranks) for ranks in GROUPS]
    group = groups[ctx.rank // TP]
    r = ctx.rank % TP

    def column():
        layer = tp.ColumnParallelLinear.from_dense(build_linear(data["column"]), group=group)
        return linear_step(layer, data["x"], shard(data["grad_wide"], r, TP))

    def row():
        layer = tp.RowParallelLinear.from_dense(build_linear(data["row"]), group=group)
        return linear_step(layer, shard(data["x_wide"], r, TP), data["grad_narrow"])

    def mlp():
        layer = tp.ParallelMLP.from_dense(build_linear(data["up"]), build_linear(data["down"]),
                                          group=group)
        x = leaf(data["x"])
        ctx.mark("mlp forward")
        y = layer(x)
        ctx.mark("mlp backward")
        y.backward(data["grad_narrow"])
        ctx.mark("mlp end")
        return {"y": y.detach(), "x_grad": x.grad}

    def cross_entropy():
        logits = leaf(shard(data["logits"], r, TP))
        loss = tp.vocab_parallel_cross_entropy(logits, data["target"], group=group)
        (loss * data["weight"]).sum().backward()
        return {"loss": loss.detach(), "grad": logits.grad}

    return run_cases(ctx, [("column", column), ("row", row), ("mlp", mlp),
                      ("cross_entropy", cross_entropy)])


@pytest.fixture(scope="module")
def run(launch):
    # A part that hangs costs only itself (harness.cases.launch_cases).
    return launch_cases(lambda env: launch(
        rank_groups, world_size=WORLD,
        rank_args=[(inputs_only(DATA[g // TP]),) for g in range(WORLD)], backend=BACKEND,
        transport=TRANSPORT, timeout=TIMEOUT_S, env=env),
        ["column", "row", "mlp", "cross_entropy"])


def _where(rank: int) -> str:
    return f"[rank {rank} of 4, position {rank % TP} in group {GROUPS[rank // TP]}]"


def _each(run, name):
    try:
        values = case_values(run.values, name)
    except NotImplementedInRank:
        raise
    except AssertionError as exc:  # a crash inside a group: most often a global rank used
        raise AssertionError(
            f"{name} in two groups of {TP}: slice by dist.get_rank(group), not the global rank, "
            f"and communicate over `group`; {exc}") from None
    for rank, value in enumerate(values):
        yield rank, rank % TP, value, DATA[rank // TP]


@pytest.mark.exercises("ColumnParallelLinear", "RowParallelLinear")
@pytest.mark.points(3)
def test_layers_in_two_groups(run):
    hint = ("slice by dist.get_rank(group), not the global rank, and communicate over `group`, "
            "not the default group")
    for rank, r, value, data in _each(run, "column"):
        expected = data["expected"]["column"]
        check(value["y"], shard(expected["y"], r, TP), f"{_where(rank)} column-parallel output",
              hint=hint)
        check(value["x_grad"], expected["x_grad"], f"{_where(rank)} column-parallel input "
              f"gradient", hint=hint)
        check(value["weight_grad"], shard(expected["weight_grad"], r, TP, dim=0),
              f"{_where(rank)} column-parallel weight gradient", hint=hint)
    for rank, r, value, data in _each(run, "row"):
        expected = data["expected"]["row"]
        check(value["y"], expected["y"], f"{_where(rank)} row-parallel output", hint=hint)
        check(value["x_grad"], shard(expected["x_grad"], r, TP),
              f"{_where(rank)} row-parallel input gradient", hint=hint)
        check(value["weight_grad"], shard(expected["weight_grad"], r, TP, dim=1),
              f"{_where(rank)} row-parallel weight gradient", hint=hint)


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(3)
def test_mlp_in_two_groups(run):
    for rank, _, value, data in _each(run, "mlp"):
        expected = data["expected"]["mlp"]
        check(value["y"], expected["y"], f"{_where(rank)} ParallelMLP output")
        check(value["x_grad"], expected["x_grad"], f"{_where(rank)} ParallelMLP input gradient")
        win = comm_windows(run, rank)
        for phase in ("forward", "backward"):
            comm = [rec for rec in win[f"mlp {phase}"] if rec.op != "mark"]
            group = tuple(GROUPS[rank // TP])
            ok = len(comm) == 1 and comm[0].op in ALL_REDUCE_OPS and comm[0].group_ranks == group
            assert ok, (
                f"{_where(rank)} ParallelMLP {phase} made {describe(comm)} over groups "
                f"{[rec.group_ranks for rec in comm]}; expected one all_reduce over {group}")


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(2)
def test_cross_entropy_in_two_groups(run):
    for rank, r, value, data in _each(run, "cross_entropy"):
        expected = data["expected"]["ce"]
        check(value["loss"], expected["loss"], f"{_where(rank)} vocab_parallel_cross_entropy",
              hint="the vocab start of a shard is dist.get_rank(group) * V/p")
        check(value["grad"], shard(expected["grad"], r, TP),
              f"{_where(rank)} gradient of the logits shard")
