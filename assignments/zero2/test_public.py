"""Public tests of zero2 (20 points): run `pytest assignments/zero2`.

Two ranks train a small model (123 parameters, so the flat space needs one padding element)
with AdamW for 3 steps, each rank on its own rows of the batch. The parent trains the same
model on one process with plain torch over the whole batch (the mean loss) and compares. The
hidden suite runs the same kind of checks on 3 and 4 ranks, with two param groups, a frozen
layer, SGD, clipping, checkpoints and overlap (README §7).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader.compare import assert_close, tolerance
from grader.seeds import seeded_generator, shifted
from harness.commlog import as_log

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")

WORLD = 2
STEPS = 3
ROWS_PER_RANK = 4
LR = 1e-2
ELEMENT_SIZE = 8  # float64
LAUNCH_TIMEOUT = 180.0  # seconds; generous for loaded machines, and a deadlock still ends


class SmallNet(nn.Module):
    """5 -> 7 -> 7 -> 3 with a 1-element `scale`: 123 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 7)
        self.scale = nn.Parameter(torch.ones(1))
        self.fc2 = nn.Linear(7, 7)
        self.head = nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.fc2(torch.tanh(self.fc1(x)) * self.scale)))


def build_model() -> nn.Module:
    torch.manual_seed(shifted(0))
    return SmallNet().double()


def make_batches(world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs [steps, world*rows, 5] and targets [steps, world*rows, 3]."""
    gen = seeded_generator(1)
    rows = world_size * ROWS_PER_RANK
    x = torch.randn(STEPS, rows, 5, generator=gen, dtype=torch.float64)
    return x, torch.randn(STEPS, rows, 3, generator=gen, dtype=torch.float64)


def per_rank(x: torch.Tensor, y: torch.Tensor, world_size: int) -> list[tuple]:
    b = ROWS_PER_RANK
    return [(x[:, r * b:(r + 1) * b], y[:, r * b:(r + 1) * b]) for r in range(world_size)]


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def single_process(x: torch.Tensor, y: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """The reference: plain AdamW on one process, mean loss over the global batch."""
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    history = []
    for step in range(STEPS):
        opt.zero_grad()
        ((model(x[step]) - y[step]) ** 2).mean().backward()
        opt.step()
        history.append(snapshot(model))
    return history


def rank_train(ctx, x, y):
    """Runs in each rank: train with Zero2Optimizer, probe it, then step without gradients."""
    zero = ctx.impl_module("zero2", "zero")
    model = build_model()
    opt = zero.Zero2Optimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=LR)
    history, probe = [], None
    for step in range(STEPS):
        ctx.mark(f"step {step}")
        opt.zero_grad()
        ((model(x[step]) - y[step]) ** 2).mean().backward()
        opt.step()
        if probe is None:
            inner = opt.inner
            states = [v for st in inner.state.values() for v in st.values()
                      if torch.is_tensor(v) and v.dim() > 0]
            probe = {
                "grads_left": [n for n, p in model.named_parameters() if p.grad is not None],
                "largest_state": max((v.numel() for v in states), default=0),
                "num_states": len(states),
                "shard_bounds": [int(b) for b in opt.shard_bounds],
            }
        history.append(snapshot(model))
    ctx.mark("empty step")
    opt.zero_grad()
    opt.step()
    ctx.mark("end")
    return {"history": history, "probe": probe, "after_empty_step": snapshot(model)}


@pytest.fixture(scope="module")
def run(launch):
    x, y = make_batches(WORLD)
    # Over the sidecars: the traffic judged below is what they carried (as_log), not what
    # the rank logged.
    result = launch(rank_train, world_size=WORLD, rank_args=per_rank(x, y, WORLD),
                    timeout=LAUNCH_TIMEOUT, transport="sidecar")
    return result, single_process(x, y)


def num_trainable() -> int:
    return sum(p.numel() for p in build_model().parameters())


def wire_bytes(records: list, world_size: int) -> dict[str, float]:
    """Bytes this rank sends, by kind, under the cost contract of zero.py's docstring."""
    out = {"reduce_scatter": 0.0, "all_gather": 0.0, "p2p": 0.0, "other": 0.0}
    for rec in records:
        name = rec.op.lstrip("_")  # _reduce_scatter_base and _all_gather_base count too
        if name.startswith("reduce_scatter"):
            out["reduce_scatter"] += rec.bytes * (world_size - 1) / world_size
        elif name.startswith("all_gather") and not name.startswith("all_gather_object"):
            out["all_gather"] += rec.bytes * (world_size - 1)
        elif rec.op in ("send", "isend"):
            out["p2p"] += rec.bytes
        elif rec.op not in ("recv", "irecv", "mark", "barrier") and not (
                rec.op == "all_reduce" and rec.numel <= 1):
            out["other"] += rec.bytes
    return out


def step_records(records: list, label: str) -> list:
    """The records between the mark `label` and the next mark (none if nothing was carried
    under that label)."""
    start = next((i for i, rec in enumerate(records)
                  if rec.op == "mark" and rec.label == label), None)
    if start is None:
        return []
    rest = records[start + 1:]
    end = next((i for i, rec in enumerate(rest) if rec.op == "mark"), len(rest))
    return rest[:end]


@pytest.mark.points(2)
def test_shard_bounds(run):
    result, _ = run
    size = -(-num_trainable() // WORLD)
    for rank, value in enumerate(result.values):
        expected = [rank * size, (rank + 1) * size]
        assert value["probe"]["shard_bounds"] == expected, (
            f"[rank {rank} of {WORLD}] shard_bounds {value['probe']['shard_bounds']}, expected "
            f"{expected} (S = ceil(P/N), README §3)")


def cut_by_boundary(name: str, got: torch.Tensor, expected: torch.Tensor, step: int) -> str:
    """A hint when `name` is wrong exactly from a shard boundary inside it on, else ""."""
    start = 0
    for other, param in build_model().named_parameters():  # the flat order (one group here)
        if other == name:
            break
        start += param.numel()
    size = -(-num_trainable() // WORLD)
    tol = tolerance(torch.float64, 10.0 * (step + 1))  # as assert_close below
    bad = (got - expected).abs().flatten() > tol.atol + tol.rtol * expected.abs().flatten()
    first = start + int(torch.argmax(bad.to(torch.int8)))
    if not bool(bad.any()) or first % size or first == start:
        return ""
    return (f"{name} is cut by the shard boundary at flat index {first} and is wrong from its "
            f"element {first - start} on: the piece after a boundary starts "
            f"{first - start} elements into the parameter (README §3)")


@pytest.mark.points(6)
def test_matches_single_process_training(run):
    result, reference = run
    for step in range(STEPS):  # the ranks agree before they are compared with the reference
        for name, tensor in result.values[0]["history"][step].items():
            for rank in range(1, WORLD):
                assert torch.equal(result.values[rank]["history"][step][name], tensor), (
                    f"[rank {rank} of {WORLD}] {name} after step {step + 1} differs from rank "
                    f"0's: all-gather every shard so that every rank copies the same values")
    for rank, value in enumerate(result.values):
        for step, expected in enumerate(reference):
            for name, tensor in expected.items():
                got = value["history"][step][name]
                cause = cut_by_boundary(name, got, tensor, step)
                assert_close(got, tensor, scale=10.0 * (step + 1), hint_first=bool(cause),
                             what=f"[rank {rank} of {WORLD}] {name} after step {step + 1}",
                             hint=cause or "average the gradients (sum / N) and all-gather "
                                           "every shard")


@pytest.mark.points(4)
def test_gradients_freed_and_state_sharded(run):
    result, _ = run
    size = -(-num_trainable() // WORLD)
    for rank, value in enumerate(result.values):
        probe = value["probe"]
        assert not probe["grads_left"], (
            f"[rank {rank} of {WORLD}] after step() these parameters still hold .grad: "
            f"{probe['grads_left']}; free them once reduce-scattered (README §3)")
        assert probe["num_states"] > 0, (
            f"[rank {rank} of {WORLD}] .inner.state is empty after a step; the shard's AdamW "
            f"moments live in the inner optimizer")
        assert probe["largest_state"] <= size, (
            f"[rank {rank} of {WORLD}] an optimizer state tensor holds "
            f"{probe['largest_state']} elements; a shard holds at most S = {size}")


@pytest.mark.points(4)
def test_traffic_is_reduce_scatter_plus_all_gather(run):
    result, _ = run
    numel = num_trainable()
    padded = -(-numel // WORLD) * WORLD
    frac = 2 * (WORLD - 1) / WORLD
    lo, hi = frac * numel * ELEMENT_SIZE, frac * padded * ELEMENT_SIZE
    for rank, wire in enumerate(result.wire):
        records = as_log(wire)
        for step in range(STEPS):
            sent = wire_bytes(step_records(records, f"step {step}"), WORLD)
            where = f"[rank {rank} of {WORLD}] step {step + 1}"
            assert sent["other"] == 0, (
                f"{where} used other collectives ({sent['other']:.0f} bytes): gradients go "
                f"through a reduce-scatter, parameters through an all-gather (README §4)")
            total = sent["reduce_scatter"] + sent["all_gather"] + sent["p2p"]
            assert 0.99 * lo <= total <= 1.01 * hi, (
                f"{where} sent {total:.0f} bytes; expected 2(N-1)/N x P x 8 = {lo:.0f}, "
                f"the same as DDP (README §4)")


@pytest.mark.points(2)
def test_step_without_gradients_changes_nothing(run):
    result, _ = run
    for rank, value in enumerate(result.values):
        for name, tensor in value["history"][-1].items():
            assert torch.equal(value["after_empty_step"][name], tensor), (
                f"[rank {rank} of {WORLD}] step() right after zero_grad() changed {name}")
        sent = wire_bytes(step_records(as_log(result.wire[rank]), "empty step"), WORLD)
        assert sum(sent.values()) == 0, (
            f"[rank {rank} of {WORLD}] step() without gradients sent {sum(sent.values()):.0f} "
            f"bytes; it should send nothing")


@pytest.mark.points(2)
def test_world_of_one(launch):
    x, y = make_batches(1)
    result = launch(rank_train, world_size=1, rank_args=per_rank(x, y, 1), timeout=LAUNCH_TIMEOUT)
    for step, expected in enumerate(single_process(x, y)):
        for name, tensor in expected.items():
            assert_close(result.values[0]["history"][step][name], tensor, scale=10.0,
                         what=f"[world of one] {name} after step {step + 1}")
