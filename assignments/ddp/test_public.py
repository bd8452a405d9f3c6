"""Public tests of ddp (20 points): run `pytest assignments/ddp`.

Two launches. Two ranks wrap the README's MLP (§3), each built from its own seed, and run one
backward each on its own rows; the parent computes, with plain torch on one process, what every
rank's `.grad` must be (the average of the ranks' gradients at rank 0's weights). One process
runs the trainer's pieces: the schedule, the optimizer groups, accumulation and a checkpoint
round trip. The hidden suite runs the same kinds of checks on 2, 3 and 4 ranks, reads the
communication from a log written outside your process, and checks overlap, `no_sync`, unused
parameters and the stretch goal (README §9).
"""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from grader.compare import assert_close, bound
from grader.seeds import seeded_generator, shifted
from harness.cases import case_values, run_cases

WORLD = 2
ROWS = 3
CAP_MB = 400 / 2**20  # 400 bytes: README §3's example
README_LAYOUT = [["2.bias", "2.weight", "1.bias"], ["1.weight"], ["0.bias", "0.weight"]]
LAUNCH_TIMEOUT = 60.0  # seconds: generous on a loaded machine; a spinning hook still ends


def build_mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 7), nn.Linear(7, 3)).double()


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def rank_seed(rank: int) -> int:
    return shifted(100) + 17 * rank  # every rank starts from other weights


# -- the wrapper on two ranks -------------------------------------------------------------------
def rank_wrapper(ctx, x, y):
    """Runs in each rank: wrap the MLP, one backward on this rank's rows."""

    def layout():
        ddp = ctx.impl_module("ddp", "ddp")
        return ddp.DistributedDataParallel(build_mlp(rank_seed(ctx.rank)),
                                           bucket_cap_mb=CAP_MB).bucket_layout

    def backward():
        ddp = ctx.impl_module("ddp", "ddp")
        model = build_mlp(rank_seed(ctx.rank))
        wrapped = ddp.DistributedDataParallel(model, bucket_cap_mb=CAP_MB)
        after = {n: p.detach().clone() for n, p in model.named_parameters()}
        mse(wrapped(x), y).backward()
        return {"after_construct": after,
                "grads": {n: p.grad for n, p in model.named_parameters()}}

    return run_cases(ctx, [("layout", layout), ("backward", backward)])


@pytest.fixture(scope="module")
def wrapper_run(launch):
    gen = seeded_generator(5)
    x = torch.randn(WORLD * ROWS, 5, generator=gen, dtype=torch.float64)
    y = torch.randn(WORLD * ROWS, 3, generator=gen, dtype=torch.float64)
    result = launch(rank_wrapper, world_size=WORLD, timeout=LAUNCH_TIMEOUT,
                    rank_args=[(x[r * ROWS:(r + 1) * ROWS], y[r * ROWS:(r + 1) * ROWS])
                               for r in range(WORLD)])
    return result.values, x, y


@pytest.mark.exercises("DistributedDataParallel")
@pytest.mark.points(3)
def test_bucket_layout_of_the_readme_example(wrapper_run):
    outcomes, _, _ = wrapper_run
    for rank, got in enumerate(case_values(outcomes, "layout", "bucket_layout")):
        hint = ("buckets are in forward order: pack the parameters in REVERSE registration "
                "order, the order backward produces them (README §3)"
                if got and "0.weight" in got[0] else
                "a bucket may not exceed the cap of 400 bytes unless it holds one parameter; "
                "close it before the parameter that would overflow it (README §3)")
        assert got == README_LAYOUT, (
            f"[rank {rank} of {WORLD}] bucket_layout: {hint}; got {got}, expected "
            f"{README_LAYOUT}")


@pytest.mark.exercises("DistributedDataParallel")
@pytest.mark.points(2)
def test_initial_broadcast_from_rank_0(wrapper_run):
    outcomes, _, _ = wrapper_run
    values = case_values(outcomes, "backward", "DistributedDataParallel + backward")
    for rank, value in enumerate(values):
        for name, p in build_mlp(rank_seed(0)).named_parameters():
            assert torch.equal(value["after_construct"][name], p.detach()), (
                f"[rank {rank} of {WORLD}] {name} after construction is not rank 0's: "
                f"broadcast rank 0's parameters and buffers in the constructor (README §2)")


@pytest.mark.exercises("DistributedDataParallel")
@pytest.mark.points(5)
def test_gradients_are_averaged_over_ranks(wrapper_run):
    outcomes, x, y = wrapper_run
    values = case_values(outcomes, "backward", "DistributedDataParallel + backward")
    per_rank = []
    for r in range(WORLD):  # each rank's own gradient at rank 0's weights
        model = build_mlp(rank_seed(0))
        mse(model(x[r * ROWS:(r + 1) * ROWS]), y[r * ROWS:(r + 1) * ROWS]).backward()
        per_rank.append({n: p.grad for n, p in model.named_parameters()})
    for rank, value in enumerate(values):
        for name in per_rank[0]:
            expected = sum(g[name] for g in per_rank) / WORLD
            got = value["grads"][name]
            assert got is not None, (
                f"[rank {rank} of {WORLD}] {name}.grad is None after backward: copy the "
                f"averaged bucket back into .grad at the end of backward (README §4)")
            hint = "average: divide the all-reduced sum by the world size (README §2)"
            if torch.allclose(got, expected * WORLD):
                hint = ("the gradient is N times the average: divide the all-reduced sum by "
                        "the world size (README §2)")
            assert_close(got, expected, what=f"[rank {rank} of {WORLD}] {name}.grad",
                         tol=bound(torch.float64, depth=64, magnitude=1.0), hint=hint,
                         hint_first=True)


# -- the trainer on one process -----------------------------------------------------------------
LR_ARGS = (1.0, 0.1, 4, 12)  # max_lr, min_lr, warmup_steps, total_steps
LR_STEPS = [0, 1, 3, 4, 8, 12, 13]


def expected_lr(step: int) -> float:
    max_lr, min_lr, warmup, total = LR_ARGS
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step > total:
        return min_lr
    return min_lr + 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) * (
        max_lr - min_lr)


class NormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 2)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.norm(torch.tanh(self.fc(x)))))


def build_norm_net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return NormNet().double()


def round_trip(obj):
    """A copy through torch.save / torch.load, as a checkpoint file would make it."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def rank_trainer(ctx, xs, ys):
    """Runs in one process: each trainer piece in its own error scope."""

    def trainer():
        return ctx.impl_module("ddp", "trainer")

    def lrs():
        return [trainer().get_lr(s, *LR_ARGS) for s in LR_STEPS]

    def groups():
        model = build_norm_net(1)
        opt = trainer().make_optimizer(model, lr=0.01, weight_decay=0.1)
        names = {id(p): n for n, p in model.named_parameters()}
        return [{"names": [names.get(id(p), "?") for p in g["params"]],
                 "weight_decay": g["weight_decay"]} for g in opt.param_groups]

    def accumulate():
        model = build_norm_net(2)
        model.eval()  # no dropout: compared with one step on the whole batch
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        loss = trainer().train_step(model, opt, list(zip(xs, ys)), mse, 0.5)
        return {"params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "loss": loss, "lr": opt.param_groups[0]["lr"]}

    def checkpoint():
        t = trainer()
        torch.manual_seed(3)
        model = build_norm_net(4)
        opt = torch.optim.AdamW(model.parameters(), lr=0.05)

        def run(m, o, steps):
            for _ in steps:
                o.zero_grad()
                mse(m(xs[0]), ys[0]).backward()  # dropout draws from the RNG
                o.step()

        run(model, opt, range(2))
        saved = round_trip(t.save_checkpoint(model, opt, 2))  # as torch.save to a file would
        run(model, opt, range(2, 4))
        fresh = build_norm_net(5)
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.05)
        torch.manual_seed(6)
        step = t.load_checkpoint(saved, fresh, fresh_opt)
        run(fresh, fresh_opt, range(step, 4))
        return {"step": step,
                "same": all(torch.equal(a, b) for a, b in zip(model.parameters(),
                                                               fresh.parameters()))}

    return run_cases(ctx, [("lr", lrs), ("groups", groups), ("accumulate", accumulate),
                           ("checkpoint", checkpoint)])


@pytest.fixture(scope="module")
def trainer_run(launch):
    gen = seeded_generator(7)
    xs = [torch.randn(3, 4, generator=gen, dtype=torch.float64) for _ in range(2)]
    ys = [torch.randn(3, 2, generator=gen, dtype=torch.float64) for _ in range(2)]
    result = launch(rank_trainer, world_size=1, args=(xs, ys), timeout=LAUNCH_TIMEOUT)
    return result.values, xs, ys


@pytest.mark.exercises("get_lr")
@pytest.mark.points(3)
def test_get_lr_boundaries(trainer_run):
    outcomes, _, _ = trainer_run
    got = case_values(outcomes, "lr", "get_lr")[0]
    for step, value in zip(LR_STEPS, got):
        hint = ("warm-up is max_lr * (step + 1) / warmup_steps: step 0 already trains and "
                "step warmup_steps - 1 reaches max_lr (README §7.2)"
                if step < LR_ARGS[2] else "cosine from max_lr at warmup_steps to min_lr at "
                                          "total_steps, min_lr after (README §7.2)")
        assert_close(torch.tensor(float(value), dtype=torch.float64),
                     torch.tensor(expected_lr(step), dtype=torch.float64),
                     what=f"get_lr(step={step}, max_lr=1.0, min_lr=0.1, warmup_steps=4, "
                          f"total_steps=12)", hint=hint, hint_first=True)


@pytest.mark.exercises("make_optimizer")
@pytest.mark.points(3)
def test_optimizer_groups(trainer_run):
    outcomes, _, _ = trainer_run
    got = case_values(outcomes, "groups", "make_optimizer")[0]
    expected = [{"names": ["fc.weight", "head.weight"], "weight_decay": 0.1},
                {"names": ["fc.bias", "norm.weight", "norm.bias", "head.bias"],
                 "weight_decay": 0.0}]
    assert got == expected, (
        f"make_optimizer's groups: weight decay on matrices only (p.dim() >= 2), none on "
        f"biases and norm weights, in model.parameters() order (README §7.1); got {got}")


@pytest.mark.exercises("train_step")
@pytest.mark.points(2)
def test_train_step_accumulation_on_one_process(trainer_run):
    outcomes, xs, ys = trainer_run
    got = case_values(outcomes, "accumulate", "train_step")[0]
    model = build_norm_net(2)
    model.eval()
    with torch.no_grad():
        losses = [float(mse(model(x), y)) for x, y in zip(xs, ys)]
    mse(model(torch.cat(xs)), torch.cat(ys)).backward()
    with torch.no_grad():
        for name, p in model.named_parameters():
            assert_close(got["params"][name], p - 0.5 * p.grad,
                         what=f"{name} after train_step with 2 micro-batches",
                         tol=bound(torch.float64, depth=64, magnitude=1.0),
                         hint="divide each micro-batch loss by k and step once (README §5)",
                         hint_first=True)
    assert got["lr"] == 0.5, f"train_step must set lr on every param group; got {got['lr']}"
    assert abs(got["loss"] - sum(losses) / 2) < 1e-12, (
        f"train_step returned {got['loss']}, expected the mean of the micro-batch losses "
        f"{sum(losses) / 2} (unscaled)")


@pytest.mark.exercises("save_checkpoint", "load_checkpoint")
@pytest.mark.points(2)
def test_checkpoint_round_trip_on_one_process(trainer_run):
    outcomes, _, _ = trainer_run
    got = case_values(outcomes, "checkpoint", "save_checkpoint / load_checkpoint")[0]
    assert got["step"] == 2, f"load_checkpoint returned step {got['step']}, saved was 2"
    assert got["same"], (
        "the resumed run differs from the uninterrupted one: save and restore the RNG state "
        "(dropout masks), the optimizer state and the model (README §7.4)")
