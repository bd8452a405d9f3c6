"""Public tests of tensor_parallel (20 points): run `pytest assignments/tensor_parallel`.

One launch of 2 ranks runs every check below; a part you have not written yet fails only its
own test ("not implemented"). The parent builds each dense layer with plain torch from a seed,
runs it forward and backward, and sends the dense weights to the ranks; each rank shards them
with `from_dense` and returns what it computed, which must equal the matching slice of the dense
result. The hidden suite runs the same kind of checks on 1, 2 and 4 ranks, with every option,
two groups inside 4 ranks, large logits, memory and bad input (README §9).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from grader.compare import assert_close
from grader.seeds import seeded_generator, shifted
from harness.cases import case_values, run_cases
from harness.commlog import as_log

WORLD = 2
DTYPE = torch.float64
HIDDEN, FFN, VOCAB = 8, 16, 12
SHAPE = (2, 3)  # batch, seq


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=DTYPE)


def dense(in_features: int, out_features: int, seed: int) -> nn.Linear:
    torch.manual_seed(shifted(seed))
    return nn.Linear(in_features, out_features).to(DTYPE)


def state(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    return linear.weight.detach().clone(), linear.bias.detach().clone()


def half(t: torch.Tensor, rank: int, dim: int = -1) -> torch.Tensor:
    """Slice `rank` of 2 along `dim`."""
    width = t.shape[dim] // WORLD
    return t.narrow(dim, rank * width, width)


# ---- the dense references (parent) ---------------------------------------------------------------

COLUMN, ROW = dense(HIDDEN, FFN, 1), dense(FFN, HIDDEN, 2)
UP, DOWN = dense(HIDDEN, FFN, 3), dense(FFN, HIDDEN, 4)
X, X_WIDE = randn(5, *SHAPE, HIDDEN), randn(6, *SHAPE, FFN)
GRAD_NARROW, GRAD_WIDE = randn(7, *SHAPE, HIDDEN), randn(8, *SHAPE, FFN)
LOGITS, LOSS_WEIGHT = randn(9, *SHAPE, VOCAB) * 3, randn(10, *SHAPE)
TARGET = torch.tensor([[0, 5, 6], [11, 3, 8]])  # ids in both halves of the vocabulary


def run_dense(fn, x: torch.Tensor, grad_y: torch.Tensor, *modules: nn.Module) -> dict:
    x = x.clone().requires_grad_()
    y = fn(x)
    y.backward(grad_y)
    return {"y": y.detach(), "x_grad": x.grad,
            "grads": [[p.grad for p in m.parameters()] for m in modules]}


EXPECTED_COLUMN = run_dense(COLUMN, X, GRAD_WIDE, COLUMN)
EXPECTED_ROW = run_dense(ROW, X_WIDE, GRAD_NARROW, ROW)
EXPECTED_MLP = run_dense(lambda x: DOWN(F.gelu(UP(x))), X, GRAD_NARROW, UP, DOWN)
_logits = LOGITS.clone().requires_grad_()
EXPECTED_LOSS = F.cross_entropy(_logits.flatten(0, -2), TARGET.flatten(),
                                reduction="none").reshape(SHAPE)
(EXPECTED_LOSS * LOSS_WEIGHT).sum().backward()
EXPECTED_LOSS, EXPECTED_LOGITS_GRAD = EXPECTED_LOSS.detach(), _logits.grad


# ---- what runs in each rank ----------------------------------------------------------------------

def build(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return linear


def rank_public(ctx, data: dict) -> dict:
    tp = ctx.impl_module("tensor_parallel", "layers")
    r = ctx.rank

    def leaf(t):
        return t.detach().clone().requires_grad_()

    def f_and_g():
        x = leaf(torch.full((2, 3), r + 1.0, dtype=DTYPE))
        y = tp.copy_to_parallel_region(x)
        y.backward(torch.full((2, 3), r + 1.0, dtype=DTYPE))
        x2 = leaf(torch.full((2, 3), r + 1.0, dtype=DTYPE))
        y2 = tp.reduce_from_parallel_region(x2)
        y2.backward(torch.full((2, 3), 10.0 * (r + 1), dtype=DTYPE))
        return {"f_y": y.detach(), "f_grad": x.grad, "g_y": y2.detach(), "g_grad": x2.grad}

    def column():
        layer = tp.ColumnParallelLinear.from_dense(build(*data["column"]))
        x = leaf(data["x"])
        y = layer(x)
        y.backward(half(data["grad_wide"], r))
        return {"y": y.detach(), "x_grad": x.grad, "weight_grad": layer.weight.grad,
                "bias_grad": layer.bias.grad}

    def row():
        layer = tp.RowParallelLinear.from_dense(build(*data["row"]))
        x = leaf(half(data["x_wide"], r))
        y = layer(x)
        y.backward(data["grad_narrow"])
        return {"y": y.detach(), "x_grad": x.grad, "weight_grad": layer.weight.grad,
                "bias_grad": layer.bias.grad}

    def mlp():
        layer = tp.ParallelMLP.from_dense(build(*data["up"]), build(*data["down"]))
        x = leaf(data["x"])
        ctx.mark("mlp forward")
        y = layer(x)
        ctx.mark("mlp backward")
        y.backward(data["grad_narrow"])
        ctx.mark("mlp end")
        return {"y": y.detach(), "x_grad": x.grad}

    def cross_entropy():
        logits = leaf(half(data["logits"], r))
        loss = tp.vocab_parallel_cross_entropy(logits, data["target"])
        (loss * data["loss_weight"]).sum().backward()
        return {"loss": loss.detach(), "grad": logits.grad}

    # Each part in its own error scope: a part that raises (a stub, a bug) fails only the
    # tests that read it; the others still run.
    return run_cases(ctx, [("f_and_g", f_and_g), ("column", column), ("row", row),
                           ("mlp", mlp), ("cross_entropy", cross_entropy)])


@pytest.fixture(scope="module")
def run(launch):
    data = {"column": state(COLUMN), "row": state(ROW), "up": state(UP), "down": state(DOWN),
            "x": X, "x_wide": X_WIDE, "grad_narrow": GRAD_NARROW, "grad_wide": GRAD_WIDE,
            "logits": LOGITS, "target": TARGET, "loss_weight": LOSS_WEIGHT}
    # CPU tensors throughout, so gloo even where a GPU would let "auto" pick NCCL.
    # Over the sidecars: the communication judged below is what they carried (as_log).
    return launch(rank_public, world_size=WORLD, args=(data,), backend="gloo", timeout=90,
                  transport="sidecar")


def values(run, name: str) -> list[dict]:
    """Every rank's value of part `name`, or what the part raised, raised here."""
    return case_values(run.values, name)


def where(rank: int) -> str:
    return f"[rank {rank} of {WORLD}]"


# ---- tests ---------------------------------------------------------------------------------------

@pytest.mark.exercises("copy_to_parallel_region", "reduce_from_parallel_region")
@pytest.mark.points(4)
def test_f_and_g(run):
    for r, v in enumerate(values(run, "f_and_g")):
        assert_close(v["f_y"], torch.full((2, 3), r + 1.0, dtype=DTYPE),
                     what=f"{where(r)} copy_to_parallel_region forward", hint="f is the identity")
        assert_close(v["f_grad"], torch.full((2, 3), 3.0, dtype=DTYPE),
                     what=f"{where(r)} copy_to_parallel_region backward",
                     hint="f's backward all-reduces the gradient: 1 + 2")
        assert_close(v["g_y"], torch.full((2, 3), 3.0, dtype=DTYPE),
                     what=f"{where(r)} reduce_from_parallel_region forward",
                     hint="g all-reduces: 1 + 2")
        assert_close(v["g_grad"], torch.full((2, 3), 10.0 * (r + 1), dtype=DTYPE),
                     what=f"{where(r)} reduce_from_parallel_region backward",
                     hint="g's backward is the identity")


@pytest.mark.exercises("ColumnParallelLinear")
@pytest.mark.points(4)
def test_column_parallel_linear(run):
    e = EXPECTED_COLUMN
    for r, v in enumerate(values(run, "column")):
        assert_close(v["y"], half(e["y"], r), what=f"{where(r)} ColumnParallelLinear output",
                     hint_first=True, hint="from_dense keeps rows slice r of the dense weight "
                                           "(and bias): output features slice r")
        assert_close(v["x_grad"], e["x_grad"], what=f"{where(r)} ColumnParallelLinear input grad",
                     hint="wrap the input in copy_to_parallel_region (f)")
        assert_close(v["weight_grad"], half(e["grads"][0][0], r, dim=0),
                     what=f"{where(r)} ColumnParallelLinear weight grad")
        assert_close(v["bias_grad"], half(e["grads"][0][1], r),
                     what=f"{where(r)} ColumnParallelLinear bias grad")


@pytest.mark.exercises("RowParallelLinear")
@pytest.mark.points(4)
def test_row_parallel_linear(run):
    e = EXPECTED_ROW
    for r, v in enumerate(values(run, "row")):
        assert_close(v["y"], e["y"], what=f"{where(r)} RowParallelLinear output",
                     hint_first=True,
                     hint="all-reduce the partial products (g), then add the bias once")
        assert_close(v["x_grad"], half(e["x_grad"], r),
                     what=f"{where(r)} RowParallelLinear input grad")
        assert_close(v["weight_grad"], half(e["grads"][0][0], r, dim=1),
                     what=f"{where(r)} RowParallelLinear weight grad",
                     hint="columns slice r of the dense weight")
        assert_close(v["bias_grad"], e["grads"][0][1],
                     what=f"{where(r)} RowParallelLinear bias grad")


@pytest.mark.exercises("ParallelMLP")
@pytest.mark.points(4)
def test_parallel_mlp_values_and_communication(run):
    e = EXPECTED_MLP
    for r, v in enumerate(values(run, "mlp")):
        assert_close(v["y"], e["y"], what=f"{where(r)} ParallelMLP output")
        assert_close(v["x_grad"], e["x_grad"], what=f"{where(r)} ParallelMLP input grad")
        phase, calls = None, {}
        for rec in as_log(run.wire[r]):
            if rec.op == "mark":
                phase = rec.label
            elif phase in ("mlp forward", "mlp backward"):
                calls.setdefault(phase, []).append(f"{rec.op}({rec.numel})")
        budget = [f"all_reduce({SHAPE[0] * SHAPE[1] * HIDDEN})"]
        for phase in ("mlp forward", "mlp backward"):
            assert calls.get(phase, []) == budget, (
                f"{where(r)} ParallelMLP {phase.split()[1]} made {calls.get(phase) or 'no calls'}; "
                f"the budget is exactly {budget[0]}: one all-reduce of batch*seq*hidden")


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(4)
def test_vocab_parallel_cross_entropy(run):
    for r, v in enumerate(values(run, "cross_entropy")):
        assert_close(v["loss"], EXPECTED_LOSS,
                     what=f"{where(r)} vocab_parallel_cross_entropy loss", hint_first=True,
                     hint="subtract the global max; target ids are global (subtract the shard's "
                          "vocab start), its logit comes from its owner; global sum of exp")
        assert_close(v["grad"], half(EXPECTED_LOGITS_GRAD, r),
                     what=f"{where(r)} gradient of the logits shard",
                     hint="softmax - one_hot(target) on this rank's vocabulary slice")
