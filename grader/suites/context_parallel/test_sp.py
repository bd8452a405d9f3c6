"""Megatron sequence parallelism (README §8): the two conjugate operators (forward values and
the gradients their backward passes, inputs untouched), their collectives from the sidecars'
wire log (one all-gather forward and one reduce-scatter backward, and the reverse), and the
sequence-parallel MLP block against the dense one (2 and 4 ranks).
"""

from __future__ import annotations

import pytest

from grader.suites.context_parallel._cases import LAUNCHES, expected, run, values
from grader.suites.context_parallel._ref import check, wire_window
from harness.cases import where

GATHER = ("all_gather", "allgather", "allgather_base")
SCATTER = ("reduce_scatter", "reduce_scatter_base")
WORLDS = [pytest.param("ring2", id="world_size=2"), pytest.param("ring4", id="world_size=4")]


@pytest.mark.exercises("gather_from_sequence_parallel_region")
@pytest.mark.points(1)
@pytest.mark.parametrize("which", WORLDS)
def test_gather_forward_and_backward(launch, impl, which):
    world = LAUNCHES[which][0]
    got = values(run(launch, impl, which), "sp gather")
    want = expected(which, "sp gather")
    for r in range(world):
        what = f"{where(r, world)} gather_from_sequence_parallel_region"
        check(got[r]["gather"], want["gather"], f"{what} forward",
              hint="all-gather the shards along the sequence (dim 1) in rank order")
        check(got[r]["gather_x_grad"], want["gather_x_grad"][r], f"{what} backward",
              hint="backward reduce-scatters: x gets its rows of the sum of every rank's "
                   "gradient")


@pytest.mark.exercises("reduce_scatter_to_sequence_parallel_region")
@pytest.mark.points(1)
@pytest.mark.parametrize("which", WORLDS)
def test_reduce_scatter_forward_and_backward(launch, impl, which):
    world = LAUNCHES[which][0]
    got = values(run(launch, impl, which), "sp rs")
    want = expected(which, "sp rs")
    for r in range(world):
        what = f"{where(r, world)} reduce_scatter_to_sequence_parallel_region"
        check(got[r]["rs"], want["rs"][r], f"{what} forward",
              hint="sum over ranks, then keep rows [r*S/N, (r+1)*S/N) of the sequence")
        check(got[r]["rs_x_grad"], want["rs_x_grad"], f"{what} backward",
              hint="backward all-gathers the gradient along the sequence in rank order")


def _kinds(result, rank: int, label: str) -> list[str]:
    return [w.kind for w in wire_window(result, rank, label)]


@pytest.mark.exercises("gather_from_sequence_parallel_region",
                       "reduce_scatter_to_sequence_parallel_region")
@pytest.mark.points(1)
def test_operators_collectives_on_the_wire(launch, impl):
    which = "ring4"
    world = LAUNCHES[which][0]
    result = run(launch, impl, which)
    values(result, "sp gather")
    values(result, "sp rs")
    phases = {"gather forward": GATHER, "gather backward": SCATTER, "rs forward": SCATTER,
              "rs backward": GATHER}
    for r in range(world):
        for phase, allowed in phases.items():
            kinds = _kinds(result, r, f"sp {phase}")
            assert len(kinds) == 1 and kinds[0] in allowed, (
                f"{where(r, world)} {phase}: the wire carried {kinds or 'nothing'}; expected "
                f"exactly one {'all-gather' if allowed is GATHER else 'reduce-scatter'} "
                f"(the conjugate of the other direction)")


@pytest.mark.exercises("sp_mlp_block")
@pytest.mark.points(1)
@pytest.mark.parametrize("which", WORLDS)
def test_sp_mlp_block_matches_dense(launch, impl, which):
    world = LAUNCHES[which][0]
    got = values(run(launch, impl, which), "sp mlp")
    want = expected(which, "sp mlp")
    hint = ("layer norm on the shard, all-gather, column then row parallel, reduce-scatter, "
            "then b2 once and the residual")
    for r in range(world):
        what = f"{where(r, world)} sp_mlp_block"
        check(got[r]["y"], want["y"][r], f"{what} output", hint=hint)
        for part in ("x_grad", "w1_grad", "b1_grad", "w2_grad"):
            value = want[part][r]
            check(got[r][part], value, f"{what} gradient {part.removesuffix('_grad')}",
                  hint="the backward of the two operators must be their conjugates")
    for part in ("ln_weight_grad", "ln_bias_grad", "b2_grad"):
        total = sum(got[r][part] for r in range(world))
        check(total, want[part], f"sp_mlp_block: sum over ranks of the gradient "
              f"{part.removesuffix('_grad')}",
              hint="each rank's share comes from its own sequence rows")


@pytest.mark.exercises("sp_mlp_block")
@pytest.mark.points(1)
def test_sp_mlp_block_collectives_on_the_wire(launch, impl):
    which = "ring4"
    world = LAUNCHES[which][0]
    result = run(launch, impl, which)
    values(result, "sp mlp")
    for r in range(world):
        for phase in ("forward", "backward"):
            kinds = _kinds(result, r, f"sp mlp {phase}")
            gathers = [k for k in kinds if k in GATHER]
            scatters = [k for k in kinds if k in SCATTER]
            others = [k for k in kinds if k not in GATHER + SCATTER]
            assert not others and len(gathers) == 1 and len(scatters) == 1, (
                f"{where(r, world)} sp_mlp_block {phase}: the wire carried {kinds}; expected "
                f"one all-gather and one reduce-scatter, no all-reduce (sequence parallelism "
                f"replaces tensor parallelism's all-reduce)")


@pytest.mark.exercises("reduce_scatter_to_sequence_parallel_region")
@pytest.mark.points(1)
def test_reduce_scatter_rejects_a_sequence_not_divisible(launch, impl):
    got = values(run(launch, impl, "ring2"), "sp rs invalid")[0]
    assert got == "ValueError", (
        f"reduce_scatter_to_sequence_parallel_region of a 3-token sequence on 2 ranks: {got}; "
        f"raise ValueError before any communication when N does not divide the sequence")
