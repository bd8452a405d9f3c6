"""The trainer: groups, schedule, accumulation on 3 ranks, bit-exact resume on 2 ranks.

Groups, the schedule and one-micro-batch steps run in one process. Accumulation: 3 ranks, 3
micro-batches each per step, 3 steps of `train_step` with `make_optimizer`'s AdamW (weight
decay 0.5 on matrices, so decaying a bias or a norm weight shows), against one single-process
AdamW step per step on all 18 rows; the sidecars' log must show one all-reduce per bucket per
step. Checkpoint: 2 ranks with dropout, a checkpoint after 3 of 5 steps, a fresh replica
(other seed, disturbed RNG) loads it and trains steps 4 and 5 again: parameters bit-identical
to the uninterrupted run; and the same in one process without any process group.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close, tolerance
from grader.suites.ddp._cases import (
    ACCUMULATE,
    CHECKPOINT,
    GROUP_KWARGS,
    GROUPS,
    LR_CONFIGS,
    LR_ERRORS,
    NET,
    SPARSE,
    accumulate_lrs,
)
from grader.suites.ddp._cases import pure as pure_launch
from grader.suites.ddp._cases import trainer3 as trainer_launch
from grader.suites.ddp._cases import wrapper2 as wrapper_launch
from grader.suites.ddp._ranks import build_model, loss_fn
from grader.suites.ddp._ref import (
    allreduces,
    describe_kinds,
    expected_lr,
    pack,
    reference_train,
    training_tol,
    two_groups,
)
from harness.cases import where


@pytest.fixture(scope="module")
def pure(launch, impl):
    return lambda: pure_launch(launch, impl.text)


@pytest.fixture(scope="module")
def trainer3(launch, impl):
    return lambda: trainer_launch(launch, impl.text)


@pytest.fixture(scope="module")
def wrapper2(launch, impl):
    return lambda: wrapper_launch(launch, impl.text)


# -- groups ------------------------------------------------------------------------------------
def expected_groups(spec: dict, seed: int, kwargs: dict) -> list[dict]:
    model = build_model(spec, seed)
    names = {id(p): n for n, p in model.named_parameters()}
    opt = two_groups(model, kwargs["lr"], kwargs["weight_decay"],
                     betas=kwargs.get("betas", (0.9, 0.95)), eps=kwargs.get("eps", 1e-8))
    return [{"names": [names[id(p)] for p in g["params"]], "lr": g["lr"],
             "weight_decay": g["weight_decay"], "eps": g["eps"], "amsgrad": False,
             "maximize": False, "betas": list(g["betas"])} for g in opt.param_groups]


def _check_groups(pure, name: str, spec: dict, seed: int, kwargs: dict) -> None:
    got = pure().values(name, "make_optimizer")[0]
    assert got["is_adamw"], "make_optimizer must return a torch.optim.AdamW"
    expected = expected_groups(spec, seed, kwargs)
    assert len(got["groups"]) == 2, (
        f"make_optimizer made {len(got['groups'])} param groups; exactly two: decay, then "
        f"no decay (README §7.1)")
    for index, (g, e) in enumerate(zip(got["groups"], expected)):
        label = ("group 0 (weight decay: p.dim() >= 2)" if index == 0 else
                 "group 1 (no weight decay: biases, norm weights, scalars)")
        assert g["names"] == e["names"], (
            f"make_optimizer {label} holds {g['names']}, expected {e['names']} "
            f"(trainable only, model.parameters() order)")
        for key in ("weight_decay", "lr", "betas", "eps", "amsgrad", "maximize"):
            assert g[key] == e[key], (
                f"make_optimizer {label}: {key} = {g[key]}, expected {e[key]} (README §7.1)")


@pytest.mark.exercises("make_optimizer")
@pytest.mark.points(2)
def test_groups_with_embedding_norm_scalar_and_frozen_bias(pure):

    _check_groups(pure, "groups", GROUPS, 11, GROUP_KWARGS[0])


@pytest.mark.exercises("make_optimizer")
@pytest.mark.points(1)
def test_groups_default_betas_and_eps(pure):

    _check_groups(pure, "groups_defaults", dict(NET, norm=True), 12, GROUP_KWARGS[1])


# -- schedule ----------------------------------------------------------------------------------
def _config_id(c: dict) -> str:
    return f"warmup={c['warmup_steps']}-total={c['total_steps']}"


@pytest.mark.exercises("get_lr")
@pytest.mark.points(2)
def test_schedule_values_at_the_boundaries(pure):
    got = pure().values("lr", "get_lr")[0]
    for config, row in zip(LR_CONFIGS, got):
        for step, value in zip(config["steps"], row):
            args = (config["max_lr"], config["min_lr"], config["warmup_steps"],
                    config["total_steps"])
            what = f"get_lr(step={step}) with {_config_id(config)}"
            assert isinstance(value, float), f"{what} raised {value}; it is defined there"
            hint = ("warm-up: max_lr * (step + 1) / warmup_steps" if step < args[2] else
                    "cosine from max_lr at warmup_steps to min_lr at total_steps, then min_lr")
            assert_close(torch.tensor(value, dtype=torch.float64),
                         torch.tensor(expected_lr(step, *args), dtype=torch.float64),
                         what=what, hint=hint, hint_first=True)


@pytest.mark.exercises("get_lr", "train_step")
@pytest.mark.points(1)
def test_schedule_and_train_step_errors(pure):
    outcomes = pure()
    got = outcomes.values("lr", "get_lr")[0][len(LR_CONFIGS):]
    for config, row in zip(LR_ERRORS, got):
        assert row == ["ValueError"], (
            f"get_lr(step={config['steps'][0]}) with {_config_id(config)} gave {row[0]}; "
            f"expected ValueError (0 <= warmup_steps < total_steps, step >= 0)")
    empty = outcomes.values("empty", "train_step")[0]
    assert empty == "ValueError", f"train_step with no micro-batches gave {empty}, not ValueError"


# -- accumulation on 3 ranks -------------------------------------------------------------------
def accumulate_reference(run) -> list[dict[str, torch.Tensor]]:
    data = run.inputs["accumulate"]
    kw = ACCUMULATE["defaults"]
    return reference_train(ACCUMULATE, data["seed"], data["x"], data["y"],
                           lambda m: two_groups(m, kw["lr"], kw["weight_decay"]),
                           lrs=accumulate_lrs())


@pytest.mark.exercises("DistributedDataParallel", "make_optimizer", "train_step")
@pytest.mark.points(3)
def test_accumulation_matches_one_large_batch_step(trainer3):
    run = trainer3()
    values = run.values("accumulate", "make_optimizer + train_step")
    ref = accumulate_reference(run)
    tol = training_tol(ref, ACCUMULATE["steps"], growth=10.0)
    for rank, value in enumerate(values):
        for step, state in enumerate(value["history"]):
            for param, tensor in ref[step + 1].items():
                assert_close(state[param], tensor, tol=tol,
                             what=f"{where(rank, run.world_size)} {param} after step {step + 1}",
                             hint="divide each micro-batch loss by k, sync only the last "
                                  "micro-batch, decay matrices only")


@pytest.mark.exercises("DistributedDataParallel", "make_optimizer", "train_step")
@pytest.mark.points(2)
def test_accumulation_communicates_once_per_step(trainer3):
    run = trainer3()
    run.values("accumulate", "make_optimizer + train_step")
    buckets = len(pack(ACCUMULATE))
    for rank in range(run.world_size):
        by_label = run.wire_by_label(rank)
        for step in range(ACCUMULATE["steps"]):
            records = by_label.get(f"accumulate step {step}", [])
            got = allreduces(records)
            assert len(got) == len(records) == buckets, (
                f"{where(rank, run.world_size)} step {step + 1} with 3 micro-batches made "
                f"{describe_kinds(records)}; expected {buckets} all-reduces (one per bucket): "
                f"run the first k-1 backward passes inside model.no_sync() (README §7.3)")


@pytest.mark.exercises("DistributedDataParallel", "make_optimizer", "train_step")
@pytest.mark.points(1)
def test_train_step_returns_the_mean_micro_batch_loss(trainer3):
    run = trainer3()
    values = run.values("accumulate", "make_optimizer + train_step")
    ref = accumulate_reference(run)
    data = run.inputs["accumulate"]
    k, rows = ACCUMULATE["micro"], ACCUMULATE["rows"]
    for rank, value in enumerate(values):
        for step, got in enumerate(value["losses"]):
            model = build_model(ACCUMULATE, data["seed"])
            model.load_state_dict(ref[step])
            base = rank * k * rows
            losses = []
            with torch.no_grad():
                for j in range(k):
                    lo, hi = base + j * rows, base + (j + 1) * rows
                    losses.append(float(loss_fn(model(data["x"][step, lo:hi]),
                                                data["y"][step, lo:hi])))
            expected = torch.tensor(sum(losses) / k, dtype=torch.float64)
            assert_close(torch.tensor(float(got), dtype=torch.float64), expected,
                         tol=tolerance(torch.float64, 100.0),
                         what=f"{where(rank, run.world_size)} train_step's return in step "
                              f"{step + 1}",
                         hint="return the mean of this rank's unscaled micro-batch losses")


# -- checkpoints on 2 ranks --------------------------------------------------------------------
CHECKPOINT_NAMES = ("DistributedDataParallel", "save_checkpoint", "load_checkpoint")


@pytest.mark.exercises(*CHECKPOINT_NAMES)
@pytest.mark.points(2)
def test_checkpoint_returned_by_rank_0_only(wrapper2):
    run = wrapper2()
    values = run.values("checkpoint", "save_checkpoint / load_checkpoint")
    for rank, value in enumerate(values):
        expected = rank == 0
        assert value["returned"] == expected, (
            f"{where(rank, run.world_size)} save_checkpoint returned "
            f"{'a checkpoint' if value['returned'] else 'None'}; only rank 0 returns (writes) "
            f"it, every other rank returns None (README §7.4)")
        assert value["step"] == CHECKPOINT["save_after"], (
            f"{where(rank, run.world_size)} load_checkpoint returned {value['step']}, the saved "
            f"step was {CHECKPOINT['save_after']}")


@pytest.mark.exercises(*CHECKPOINT_NAMES)
@pytest.mark.points(3)
def test_resume_is_bit_identical(wrapper2):
    run = wrapper2()
    values = run.values("checkpoint", "save_checkpoint / load_checkpoint")
    save_after = CHECKPOINT["save_after"]
    for rank, value in enumerate(values):
        assert len(value["resumed"]) == CHECKPOINT["steps"] - save_after, (
            f"{where(rank, run.world_size)} the resumed run trained {len(value['resumed'])} "
            f"steps; load_checkpoint must return the saved step")
        for i, state in enumerate(value["resumed"]):
            step = save_after + i
            for param, tensor in value["history"][step].items():
                assert torch.equal(state[param], tensor), (
                    f"{where(rank, run.world_size)} after resuming, {param} at step {step + 1} "
                    f"differs from the uninterrupted run: restore every rank's own RNG state "
                    f"(dropout), the optimizer state and the model (README §7.4)")


@pytest.mark.exercises("train_step")
@pytest.mark.points(1)
def test_train_step_with_one_micro_batch(pure):
    run = pure()
    got = run.values("sparse", "train_step")[0]
    data = run.inputs["sparse"]
    model = build_model(SPARSE, data["seed"])
    opt = torch.optim.AdamW(model.parameters(), **SPARSE["defaults"])
    for step in range(SPARSE["steps"]):
        model.use_extra = step == 0  # extra gets no gradient in step 2: AdamW skips it
        for group in opt.param_groups:
            group["lr"] = SPARSE["lrs"][step]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(data["x"][step]), data["y"][step]).backward()
        opt.step()
        for name, p in model.named_parameters():
            assert_close(got["history"][step][name], p.detach(), tol=tolerance(torch.float64),
                         what=f"{name} after train_step {step + 1} with one micro-batch",
                         hint="k = 1 is one ordinary step; zero_grad(set_to_none=True) so "
                              "that a parameter without a gradient is skipped")


@pytest.mark.exercises("save_checkpoint", "load_checkpoint")
@pytest.mark.points(1)
def test_checkpoint_without_a_process_group(pure):
    got = pure().values("no_group_trainer", "save_checkpoint / load_checkpoint")[0]
    assert got["returned"], (
        "without a process group save_checkpoint returned None; the process is rank 0 of a "
        "world of one and returns the checkpoint")
    assert got["step"] == 1, f"load_checkpoint returned {got['step']}, the saved step was 1"
    assert got["same"], "without a process group, the resumed run differs from the original"
