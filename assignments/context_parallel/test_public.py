"""Public tests of context_parallel (20 points): run `pytest assignments/context_parallel`.

One launch of 2 ranks runs every check below; a part you have not written yet fails only its
own test ("not implemented"). The parent draws every input from a seed, computes full attention
(and the dense MLP block) on the whole sequence with plain torch, and sends each rank its
shard; what a rank returns must equal its rows of the full result. The hidden suite runs the
same kinds of checks on 2, 3 and 4 ranks, in float32 too, counts the ring's messages on the
wire, checks overlap and memory, and grades the ring backward (stretch) (README §9).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import case_values, run_cases

WORLD = 2
DTYPE = torch.float64
BATCH, HEADS, SEQ, DIM, DIM_V = 2, 4, 8, 4, 3
HIDDEN, FFN = 6, 8


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=DTYPE)


def attention(q, k, v, causal=False, q_offset=0, k_offset=0):
    """Plain attention with its log-sum-exp (the spec of README §3)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        qp = torch.arange(q.shape[-2]) + q_offset
        kp = torch.arange(k.shape[-2]) + k_offset
        scores = scores.masked_fill(kp[None, :] > qp[:, None], float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def rows(t: torch.Tensor, rank: int, dim: int = 2) -> torch.Tensor:
    """Rank `rank`'s contiguous shard of 2 along `dim`."""
    return t.chunk(WORLD, dim=dim)[rank].clone()


# ---- the inputs and references (parent) ------------------------------------------------------

Q, K, V = randn(1, BATCH, HEADS, SEQ, DIM), randn(2, BATCH, HEADS, SEQ, DIM), \
    randn(3, BATCH, HEADS, SEQ, DIM_V)
FULL = attention(Q, K, V)[0]
FULL_CAUSAL = attention(Q, K, V, causal=True)[0]
X = randn(4, BATCH, SEQ, HIDDEN)
LN_W, LN_B = 1 + 0.1 * randn(5, HIDDEN), randn(6, HIDDEN)
W1, B1, W2, B2 = randn(7, FFN, HIDDEN) * 0.4, randn(8, FFN), randn(9, HIDDEN, FFN) * 0.4, \
    randn(10, HIDDEN)
GRAD_Y = randn(11, BATCH, SEQ, HIDDEN)


def dense_block(x):
    h = F.layer_norm(x, (HIDDEN,), LN_W, LN_B, eps=1e-5)
    return x + F.gelu(h @ W1.t() + B1) @ W2.t() + B2


_x = X.clone().requires_grad_()
dense_block(_x).backward(GRAD_Y)
EXPECTED_Y, EXPECTED_X_GRAD = dense_block(X), _x.grad


# ---- what runs in each rank -------------------------------------------------------------------

def rank_public(ctx, data: dict) -> dict:
    cp = ctx.impl_module("context_parallel", "cp")
    r = ctx.rank
    q, k, v = (rows(t, r) for t in (data["q"], data["k"], data["v"]))

    def block():
        # Rows 4..7 of the sequence against keys 2..5: a partly masked causal block.
        qb, kb, vb = data["q"][:, :, 4:8], data["k"][:, :, 2:6], data["v"][:, :, 2:6]
        out, lse = cp.attention_with_lse(qb, kb, vb, True, 4, 2)
        return {"out": out, "lse": lse}

    def merge():
        return list(cp.merge(*data["parts"][0], *data["parts"][1]))

    def ring():
        return {"plain": cp.ring_attention(q, k, v),
                "causal": cp.ring_attention(q, k, v, causal=True)}

    def zigzag():
        return cp.zigzag_split(16, 2)

    def ulysses():
        return cp.ulysses_attention(q, k, v, causal=True)

    def sp():
        f = FFN // WORLD
        x = rows(data["x"], r, dim=1).requires_grad_()
        y = cp.sp_mlp_block(x, data["ln_w"], data["ln_b"], data["w1"][r * f:(r + 1) * f],
                            data["b1"][r * f:(r + 1) * f], data["w2"][:, r * f:(r + 1) * f],
                            data["b2"])
        y.backward(rows(data["grad_y"], r, dim=1))
        return {"y": y.detach(), "x_grad": x.grad}

    # Each part in its own error scope: a stub fails only the tests that read it.
    with torch.no_grad():
        parts = run_cases(ctx, [("block", block), ("merge", merge), ("zigzag", zigzag),
                                ("ulysses", ulysses)])
    parts.update(run_cases(ctx, [("sp", sp)]))
    with torch.no_grad():  # last: a ring that fails mid-way can disturb what follows it
        parts.update(run_cases(ctx, [("ring", ring)]))
    return parts


@pytest.fixture(scope="module")
def run(launch):
    # Attention over keys 0..2 and over keys 3..7, computed here: merge must combine them.
    parts = [attention(Q, K[:, :, :3], V[:, :, :3]), attention(Q, K[:, :, 3:], V[:, :, 3:])]
    data = {"q": Q, "k": K, "v": V, "parts": parts, "x": X, "ln_w": LN_W, "ln_b": LN_B,
            "w1": W1, "b1": B1, "w2": W2, "b2": B2, "grad_y": GRAD_Y}
    return launch(rank_public, world_size=WORLD, args=(data,), backend="gloo", timeout=90)


def values(run, name: str) -> list:
    """Every rank's value of part `name`, or what the part raised, raised here."""
    return case_values(run.values, name)


def where(rank: int) -> str:
    return f"[rank {rank} of {WORLD}]"


# ---- tests ------------------------------------------------------------------------------------

@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(3)
def test_attention_with_lse_global_causal_mask(run):
    out, lse = attention(Q[:, :, 4:8], K[:, :, 2:6], V[:, :, 2:6], True, 4, 2)
    got = values(run, "block")[0]
    assert_close(got["out"], out, what="attention_with_lse(q rows 4..7, k rows 2..5) out",
                 hint_first=True, hint="scale by 1/sqrt(dim); mask where k_offset+j > "
                                       "q_offset+i (global positions)")
    assert_close(got["lse"], lse, what="attention_with_lse lse", hint_first=True,
                 hint="the natural log of the sum of exp(scores) per row")


@pytest.mark.exercises("merge")
@pytest.mark.points(3)
def test_merge_two_key_blocks(run):
    out, lse = values(run, "merge")[0]
    assert_close(lse, attention(Q, K, V)[1], what="merge lse", hint_first=True,
                 hint="lse = logaddexp(lse_a, lse_b)")
    assert_close(out, FULL, what="merge out", hint_first=True,
                 hint="weight each part by exp(lse_part - lse), not a plain average")


@pytest.mark.exercises("ring_attention")
@pytest.mark.points(4)
def test_ring_attention_values(run):
    for r, got in enumerate(values(run, "ring")):
        assert_close(got["plain"], rows(FULL, r), what=f"{where(r)} ring_attention",
                     hint_first=True, hint="merge every block that travels the ring")
        assert_close(got["causal"], rows(FULL_CAUSAL, r),
                     what=f"{where(r)} ring_attention causal", hint_first=True,
                     hint="the block from group rank j starts at position j*S/N; send to "
                          "r+1, receive from r-1 (one direction)")


@pytest.mark.exercises("zigzag_split")
@pytest.mark.points(3)
def test_zigzag_split(run):
    got = values(run, "zigzag")[0]
    want = [torch.tensor([0, 1, 2, 3, 12, 13, 14, 15]), torch.tensor([4, 5, 6, 7, 8, 9, 10, 11])]
    assert [t.tolist() for t in got] == [t.tolist() for t in want], (
        f"zigzag_split(16, 2): rank r takes chunk r and chunk 2N-1-r of 2N chunks; got "
        f"{[t.tolist() for t in got]}")


@pytest.mark.exercises("ulysses_attention")
@pytest.mark.points(3)
def test_ulysses_attention_values(run):
    for r, got in enumerate(values(run, "ulysses")):
        assert_close(got, rows(FULL_CAUSAL, r), what=f"{where(r)} ulysses_attention causal",
                     hint_first=True, hint="all-to-all splits heads, gathers the sequence in "
                                           "rank order; the way back does the reverse")


@pytest.mark.exercises("sp_mlp_block")
@pytest.mark.points(4)
def test_sequence_parallel_mlp_block(run):
    for r, got in enumerate(values(run, "sp")):
        assert_close(got["y"], rows(EXPECTED_Y, r, dim=1), what=f"{where(r)} sp_mlp_block",
                     hint_first=True, hint="all-gather before the column layer, "
                                           "reduce-scatter after the row layer, b2 once")
        assert_close(got["x_grad"], rows(EXPECTED_X_GRAD, r, dim=1),
                     what=f"{where(r)} sp_mlp_block input gradient", hint_first=True,
                     hint="the operators' backwards are reduce-scatter and all-gather")
