"""Parity: training through the wrapper equals single-process training on the global batch.

The replicas are built from different seeds on every rank (the wrapper must broadcast rank
0's parameters); their buffer is the same on every rank except in the construction-only case
"construct4", so that a missing buffer broadcast costs the construction tests alone. SGD with
momentum on 4 ranks (3 buckets, a frozen bias) and
plain SGD on 2 ranks (one bucket, the default cap), each rank on its own rows; the reference
is plain torch on one process over all rows (the mean loss), from rank 0's seed.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.ddp._cases import CONSTRUCT4, SGD2, SGD4, SUBGROUPS, WORLD1, wrapper2, wrapper4
from grader.suites.ddp._cases import pure as pure_launch
from grader.suites.ddp._ranks import build_model, state_of
from grader.suites.ddp._ref import grad_tol, local_grads, reference_train, training_tol
from harness.cases import where

pytestmark = pytest.mark.exercises("DistributedDataParallel")

TRAINING_HINT = ("average the gradients over ranks (all-reduce SUM, divide by N) and leave "
                 "the parameters to the optimizer")


@pytest.fixture(scope="module")
def runs(launch, impl):
    return {"sgd4": lambda: wrapper4(launch, impl.text),
            "sgd2": lambda: wrapper2(launch, impl.text),
            "pure": lambda: pure_launch(launch, impl.text)}


def reference(spec: dict, run, name: str) -> list[dict[str, torch.Tensor]]:
    data = run.inputs[name]
    return reference_train(spec, data["seed"], data["x"], data["y"],
                           lambda m: torch.optim.SGD(m.parameters(), **spec["defaults"]))


@pytest.mark.points(3)
def test_construction_broadcasts_rank_0_state(runs):
    run = runs["sgd4"]()
    values = run.values("sgd4", "DistributedDataParallel training")
    initial = reference(SGD4, run, "sgd4")[0]
    # A replica whose buffer differs by rank too (elsewhere the buffer is the same on every
    # rank, so that a missing buffer broadcast costs this test only).
    own = run.values("construct4", "DistributedDataParallel construction")
    own_initial = state_of(build_model(CONSTRUCT4, run.inputs["construct4"]["seed"]))
    buffers = {n for n, _ in build_model(CONSTRUCT4, 0).named_buffers()}
    for per_rank, reference_state in ((values, initial), (own, own_initial)):
        for rank, value in enumerate(per_rank):
            for name, tensor in reference_state.items():
                kind = "buffer" if name in buffers else "parameter"
                assert torch.equal(value["after_construct"][name], tensor), (
                    f"{where(rank, run.world_size)} {kind} {name} after construction is not "
                    f"rank 0's: broadcast every parameter and every buffer from rank 0 in the "
                    f"constructor (README §6)")


@pytest.mark.points(3)
def test_gradients_averaged_over_four_ranks(runs):
    run = runs["sgd4"]()
    values = run.values("sgd4", "DistributedDataParallel training")
    data = run.inputs["sgd4"]
    rows = data["x"].shape[1] // run.world_size
    per_rank = [local_grads(SGD4, data["seed"], data["x"][0, r * rows:(r + 1) * rows],
                            data["y"][0, r * rows:(r + 1) * rows]) for r in range(run.world_size)]
    expected = {n: sum(g[n] for g in per_rank) / run.world_size for n in per_rank[0]}
    for rank, value in enumerate(values):
        for name, ref in expected.items():
            got = value["grads0"][name]
            assert got is not None, (
                f"{where(rank, run.world_size)} {name}.grad is None after backward: write the "
                f"averaged bucket back into .grad at the end of backward (README §4)")
            hint = TRAINING_HINT
            if torch.allclose(got, ref * run.world_size):
                hint = "the gradient is N times the average: divide the all-reduced sum by N"
            elif torch.allclose(got, per_rank[rank][name]):
                hint = "the gradient is this rank's own: it was never all-reduced"
            assert_close(got, ref, what=f"{where(rank, run.world_size)} {name}.grad in step 1",
                         tol=grad_tol(expected), hint=hint, hint_first=True)


def _check_history(run, name: str, spec: dict, growth: float) -> None:
    values = run.values(name, "DistributedDataParallel training")
    ref = reference(spec, run, name)
    tol = training_tol(ref, spec["steps"], growth)
    for rank, value in enumerate(values):
        for step, state in enumerate(value["history"]):
            for param, tensor in ref[step + 1].items():
                assert_close(state[param], tensor, tol=tol, hint=TRAINING_HINT,
                             what=f"{where(rank, run.world_size)} {param} after step {step + 1}")


@pytest.mark.points(3)
def test_sgd_momentum_four_ranks_matches_single_process(runs):
    _check_history(runs["sgd4"](), "sgd4", SGD4, growth=2.0)


@pytest.mark.points(3)
def test_sgd_two_ranks_one_bucket_matches_single_process(runs):
    _check_history(runs["sgd2"](), "sgd2", SGD2, growth=2.0)


@pytest.mark.points(1)
@pytest.mark.parametrize("name", ["sgd4", "sgd2"], ids="run={}".format)
def test_parameters_identical_on_every_rank(runs, name):
    run = runs[name]()
    values = run.values(name, "DistributedDataParallel training")
    for step, state in enumerate(values[0]["history"]):
        for param, tensor in state.items():
            for rank in range(1, run.world_size):
                assert torch.equal(values[rank]["history"][step][param], tensor), (
                    f"{where(rank, run.world_size)} {param} after step {step + 1} differs from "
                    f"rank 0's: every rank must get the very same averaged gradients")


@pytest.mark.points(1)
def test_frozen_parameter_untouched_and_in_no_bucket(runs):
    run = runs["sgd4"]()
    values = run.values("sgd4", "DistributedDataParallel training")
    initial = reference(SGD4, run, "sgd4")[0]
    for rank, value in enumerate(values):
        for param in SGD4["frozen"]:
            assert value["grads0"][param] is None, (
                f"{where(rank, run.world_size)} frozen {param} got a .grad; parameters with "
                f"requires_grad=False take no part in the buckets")
            assert all(param not in bucket for bucket in value["layout"]), (
                f"{where(rank, run.world_size)} frozen {param} is in a bucket")
            assert torch.equal(value["history"][-1][param], initial[param]), (
                f"{where(rank, run.world_size)} frozen {param} changed")


@pytest.mark.points(2)
def test_process_subgroups(runs):
    run = runs["sgd4"]()
    values = run.values("subgroups", "DistributedDataParallel(group=...)")
    data = run.inputs["subgroups"]
    rows = data["x"].shape[1] // run.world_size
    for first in (0, 2):  # the groups {0, 1} and {2, 3}, each with its own rank 0
        seed = data["seed"] + 1009 * first  # _cases.init_seed of the group's first rank
        initial = {n: p.detach() for n, p in build_model(SUBGROUPS, seed).named_parameters()}
        per_rank = [local_grads(SUBGROUPS, seed, data["x"][0, r * rows:(r + 1) * rows],
                                data["y"][0, r * rows:(r + 1) * rows])
                    for r in (first, first + 1)]
        expected = {n: (per_rank[0][n] + per_rank[1][n]) / 2 for n in per_rank[0]}
        for rank in (first, first + 1):
            at = f"{where(rank, run.world_size)} in group {[first, first + 1]}"
            for name, tensor in initial.items():
                assert torch.equal(values[rank]["after_construct"][name], tensor), (
                    f"{at}: {name} after construction is not that of the group's rank 0 "
                    f"(global rank {first}); broadcast from group rank 0, over `group`")
            for name, ref in expected.items():
                assert_close(values[rank]["grads"][name], ref, tol=grad_tol(expected),
                             what=f"{at}: {name}.grad",
                             hint="all-reduce over `group` and divide by its size")


@pytest.mark.points(1)
def test_world_of_one(runs):
    run = runs["pure"]()
    for name, what in (("world1", "a world of one"), ("no_group_wrapper", "no process group")):
        got = run.values(name, f"DistributedDataParallel in {what}")[0]
        data = run.inputs[name]
        expected = local_grads(WORLD1, data["seed"], data["x"][0], data["y"][0])
        initial = {n: p.detach()
                   for n, p in build_model(WORLD1, data["seed"]).named_parameters()}
        for param, ref in expected.items():
            assert torch.equal(got["params"][param], initial[param]), (
                f"[{what}] the wrapper changed {param}")
            assert_close(got["grads"][param], ref, what=f"[{what}] {param}.grad",
                         tol=grad_tol(expected),
                         hint="with one rank the average is the gradient; without a process "
                              "group, communicate nothing")
