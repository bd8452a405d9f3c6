"""Public tests of framework (20 of 100 points): small cases that show what each part must do.

Run them with `pytest assignments/framework`. Your code runs in a separate process (a "rank");
these tests send it inputs and judge what comes back against references computed here with
plain torch (for FLOPs, torch's own `torch.utils.flop_counter.FlopCounterMode`).
"""

from __future__ import annotations

import math
import operator

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from grader.compare import assert_close
from grader.seeds import seeded_generator

ID = "framework"


# ---- §2 FLOPs ----------------------------------------------------------------------------------

def rank_count_mm(ctx, a, b):
    flops = ctx.impl_module(ID, "flops")
    with flops.FlopCounter() as counter:
        out = a @ b
    return {"flops": counter.flops, "out": out}


@pytest.mark.points(3)
@pytest.mark.exercises("FlopCounter")
def test_flop_counter_counts_one_matmul(launch):
    gen = seeded_generator(11)
    a, b = torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)
    got = launch(rank_count_mm, world_size=1, args=(a, b)).values[0]
    assert got["flops"] == {"aten.mm": 2 * 8 * 4 * 16}, (
        f"[8, 16] @ [16, 4] is one aten.mm of 2*m*n*k = {2 * 8 * 4 * 16} FLOPs (a multiply-add "
        f"is 2 FLOPs); FlopCounter.flops was {got['flops']}")
    assert_close(got["out"], a.double() @ b.double(), dtype=torch.float32,
                 what="a @ b under FlopCounter", hint="return func(*args, **kwargs)",
                 hint_first=True)


def linear_layer(x, w, b):
    return F.linear(x, w, b)


def rank_forward_backward(ctx, x, w, b):
    flops = ctx.impl_module(ID, "flops")
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    return flops.forward_backward_flops(lambda: linear_layer(x, w, b))


@pytest.mark.points(2)
@pytest.mark.exercises("forward_backward_flops")
def test_forward_backward_flops_of_a_linear_layer(launch):
    gen = seeded_generator(12)
    x, w, b = (torch.randn(*shape, generator=gen) for shape in ((2, 5, 16), (8, 16), (8,)))
    got = launch(rank_forward_backward, world_size=1, args=(x, w, b)).values[0]
    want = {}
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    with FlopCounterMode(display=False) as forward:
        out = linear_layer(*xs)
    with FlopCounterMode(display=False) as backward:
        out.backward(torch.ones_like(out))
    for part, mode in (("forward", forward), ("backward", backward)):
        want[part] = {str(op): n for op, n in mode.get_flop_counts()["Global"].items()}
    assert got.get("backward"), (
        f"the backward counted nothing: call out.backward(...) while a second FlopCounter is "
        f"active; expected {want['backward']} (two matmuls: dX and dW)")
    for part in ("forward", "backward"):
        for op, n in want[part].items():
            have = got[part].get(op, 0)
            assert have == n, (
                f"{part}: {op} counted {have} FLOPs, expected {n}: a product [m, k] @ [k, n] is "
                f"2*m*n*k FLOPs (a multiply-add is 2 FLOPs), and addmm's bias is free")
    assert got == want, (f"forward_backward_flops of a Linear(16, 8) on [2, 5, 16]: expected "
                         f"{want}, got {got}")


# ---- §3 autograd's memory ----------------------------------------------------------------------

def rank_saved(ctx, x, y):
    memory = ctx.impl_module(ID, "autograd_memory")
    x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
    return [memory.saved_tensor_bytes(torch.exp, x),
            memory.saved_tensor_bytes(operator.mul, x, y),
            memory.saved_tensor_bytes(operator.mul, x, x)]


@pytest.mark.points(3)
@pytest.mark.exercises("saved_tensor_bytes")
def test_saved_tensor_bytes_of_exp_and_mul(launch):
    gen = seeded_generator(13)
    x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 8, generator=gen)
    got = launch(rank_saved, world_size=1, args=(x, y)).values[0]
    one = 16 * 8 * 4
    assert got == [one, 2 * one, one], (
        f"exp saves its output ({one} bytes); x * y saves both ({2 * one}); x * x saves x "
        f"twice, one storage ({one}); got {got}")


def mlp(x, w1, w2):
    return torch.tanh(x @ w1) @ w2


def rank_checkpoint(ctx, x, w1, w2, g):
    memory = ctx.impl_module(ID, "autograd_memory")
    xs = [t.clone().requires_grad_() for t in (x, w1, w2)]
    out = memory.checkpoint(mlp, *xs)
    out.backward(g)
    return {"out": out, "grads": [t.grad for t in xs]}


@pytest.mark.points(3)
@pytest.mark.exercises("checkpoint")
def test_checkpoint_gives_autograds_gradients(launch):
    gen = seeded_generator(14)
    x, w1, w2, g = (torch.randn(*shape, generator=gen)
                    for shape in ((6, 4), (4, 10), (10, 3), (6, 3)))
    got = launch(rank_checkpoint, world_size=1, args=(x, w1, w2, g)).values[0]
    xs = [t.double().requires_grad_() for t in (x, w1, w2)]
    out = mlp(*xs)
    out.backward(g.double())
    assert_close(got["out"], out.detach(), dtype=torch.float32, what="checkpoint(mlp, ...)",
                 hint="return fn(*inputs)", hint_first=True)
    for name, grad, want in zip(("x", "w1", "w2"), got["grads"], xs, strict=True):
        assert grad is not None, f"checkpoint: no gradient reached {name}"
        assert_close(grad, want.grad, dtype=torch.float32, what=f"gradient of {name}",
                     hint="recompute fn in backward and differentiate it", hint_first=True)


def rank_swiglu(ctx, gate, up, g):
    memory = ctx.impl_module(ID, "autograd_memory")
    gate, up = gate.clone().requires_grad_(), up.clone().requires_grad_()
    out = memory.swiglu(gate, up)
    out.backward(g)
    return {"out": out, "grads": [gate.grad, up.grad]}


@pytest.mark.points(3)
@pytest.mark.exercises("swiglu")
def test_swiglu_values_and_gradients(launch):
    gen = seeded_generator(15)
    gate, up, g = (torch.randn(3, 7, generator=gen) for _ in range(3))
    gate = gate * 2
    got = launch(rank_swiglu, world_size=1, args=(gate, up, g)).values[0]
    ref_gate, ref_up = gate.double().requires_grad_(), up.double().requires_grad_()
    out = F.silu(ref_gate) * ref_up
    out.backward(g.double())
    assert_close(got["out"], out.detach(), dtype=torch.float32, what="swiglu(gate, up)",
                 hint="silu(gate) * up", hint_first=True)
    assert_close(got["grads"][0], ref_gate.grad, dtype=torch.float32, what="gradient of gate",
                 hint="grad * up * s * (1 + gate * (1 - s))", hint_first=True)
    assert_close(got["grads"][1], ref_up.grad, dtype=torch.float32, what="gradient of up",
                 hint="grad * silu(gate)", hint_first=True)


# ---- §4 torch.compile --------------------------------------------------------------------------

def graph_break_function(state, x, hidden):
    """GraphBreakMLP's function, restated in float64."""
    s = {k: v.double() for k, v in state.items()}
    h = F.linear(x.double(), s["up.weight"], s["up.bias"])
    h = F.gelu(h / torch.clamp(h.abs().max(), min=1.0))
    mean = h.cumsum(1) / torch.arange(1, x.shape[1] + 1, dtype=torch.float64)[:, None]
    return x.double() + F.linear(mean / math.sqrt(hidden), s["down.weight"], s["down.bias"])


def rank_friendly(ctx, state, xs):
    import torch._dynamo
    from torch._dynamo.utils import counters

    model = ctx.impl_module(ID, "compile_friendly").FriendlyMLP(16, 32)
    model.load_state_dict(state)
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        eager = [model(x) for x in xs]
        compiled = torch.compile(model, backend="eager")
        compiled(xs[0])
    breaks = [str(reason)[:200] for reason in counters["graph_break"]]
    torch._dynamo.reset()
    return {"eager": eager, "breaks": breaks}


@pytest.mark.points(3)
@pytest.mark.exercises("FriendlyMLP")
def test_friendly_mlp_equals_graph_break_mlp_without_graph_breaks(launch):
    torch.manual_seed(0)
    state = {"up.weight": torch.randn(32, 16) * 0.5, "up.bias": torch.randn(32) * 0.5,
             "down.weight": torch.randn(16, 32) * 0.5, "down.bias": torch.randn(16) * 0.5}
    xs = [torch.randn(2, length, 16) * 2 for length in (3, 11)]
    got = launch(rank_friendly, world_size=1, args=(state, xs), timeout=120.0).values[0]
    for x, out in zip(xs, got["eager"], strict=True):
        assert_close(out, graph_break_function(state, x, 32), dtype=torch.float32,
                     what=f"FriendlyMLP, seq={x.shape[1]}", hint="same function as "
                     "GraphBreakMLP: see the provided module's docstring", hint_first=True)
    assert not got["breaks"], f"FriendlyMLP has a graph break: {got['breaks'][0]}"


# ---- §5 the FX pass ----------------------------------------------------------------------------

def small_graph(x, y):
    return torch.relu(x * torch.sigmoid(x) + y)


def rank_fuse(ctx, x, y):
    fx_fusion = ctx.impl_module(ID, "fx_fusion")
    gm = fx_fusion.fuse_patterns(torch.fx.symbolic_trace(small_graph))
    names = [getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
             if n.op in ("call_function", "call_method")]
    return {"names": names, "out": gm(x, y)}


@pytest.mark.points(3)
@pytest.mark.exercises("fuse_patterns")
def test_fuse_patterns_rewrites_silu_and_add_relu(launch):
    gen = seeded_generator(16)
    x, y = torch.randn(4, 5, generator=gen), torch.randn(4, 5, generator=gen)
    got = launch(rank_fuse, world_size=1, args=(x, y)).values[0]
    assert sorted(got["names"]) == ["add_relu", "silu"], (
        f"relu(x * sigmoid(x) + y) should become add_relu(silu(x), y): two nodes, got "
        f"{got['names']}")
    assert_close(got["out"], small_graph(x.double(), y.double()), dtype=torch.float32,
                 what="the rewritten graph's output", hint="call gm.recompile()", hint_first=True)
