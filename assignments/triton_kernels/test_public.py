"""Public tests of triton_kernels (20 points): run `pytest assignments/triton_kernels`.

One rank process runs every call below in Triton's interpreter (TRITON_INTERPRET=1, CPU
tensors, float32), each under `harness.compute_guard.ComputeGuard`; this process compares the
results with float64 torch references. The hidden suite checks more shapes and layouts, edge
lengths, lse values and, on a GPU, compiled values and speed (README §9).
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import case_value, run_cases
from harness.compute_guard import ComputeGuard

INTERPRET_ENV = {"TRITON_INTERPRET": "1"}
BLOCK_SIZE = 8


# -- inputs and references (this process) ------------------------------------------------------
def make_inputs() -> dict[str, tuple]:
    gen = seeded_generator(0)
    x = torch.randn(5, 200, generator=gen)
    big = torch.randn(3, 90, generator=gen) * 1e4
    q, k, v = (torch.randn(1, 2, 37, 16, generator=gen) for _ in range(3))
    lengths = [1, 17, 8]  # one token; one past a block boundary; exactly one block
    num_blocks = 6
    k_cache = torch.randn(num_blocks, BLOCK_SIZE, 2, 16, generator=gen)
    v_cache = torch.randn(num_blocks, BLOCK_SIZE, 2, 16, generator=gen)
    tables = torch.tensor([[4, -1, -1], [0, 5, 2], [3, -1, -1]], dtype=torch.int32)
    return {
        "softmax": (x,),
        "softmax_large": (big,),
        "rms_norm": (torch.randn(4, 90, generator=gen), torch.randn(90, generator=gen)),
        "attention": (q, k, v),
        "paged": (torch.randn(3, 2, 16, generator=gen), k_cache, v_cache, tables,
                  torch.tensor(lengths, dtype=torch.int32)),
    }


def attention_ref(q, k, v, causal):
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    out = torch.softmax(scores, dim=-1) @ v.double()
    return out.float(), torch.logsumexp(scores, dim=-1).float()


def paged_ref(q, k_cache, v_cache, tables, lengths):
    outs = []
    for b, length in enumerate(lengths.tolist()):
        blocks = tables[b, :math.ceil(length / BLOCK_SIZE)].long()
        k = k_cache[blocks].reshape(-1, *k_cache.shape[2:])[:length].double()
        v = v_cache[blocks].reshape(-1, *v_cache.shape[2:])[:length].double()
        scores = torch.einsum("hd,thd->ht", q[b].double(), k) / math.sqrt(q.shape[-1])
        outs.append(torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v))
    return torch.stack(outs).float()


# -- the rank function (runs in the rank process) -----------------------------------------------
CALLS = [  # (label, function, input key, kwargs)
    ("softmax", "softmax", "softmax", {}),
    ("softmax_large", "softmax", "softmax_large", {}),
    ("rms_norm", "rms_norm", "rms_norm", {}),
    ("attention", "flash_attention", "attention", {}),
    ("attention_causal", "flash_attention", "attention", {"causal": True}),
    ("paged", "paged_attention_decode", "paged", {}),
]


def rank_run_all(ctx, inputs):
    """Every call under the compute guard, each in its own error scope (harness.cases): one
    wrapper that raises fails only the tests of that call."""
    kernels = ctx.impl_module("triton_kernels", "kernels")

    def run(function, args, kwargs):
        before = [a.clone() for a in args]
        guard = ComputeGuard(function, strict=False)
        with guard:
            out = getattr(kernels, function)(*args, **kwargs)
        return {"out": out, "guard": guard.message(),
                "inputs_changed": not all(torch.equal(a, b) for a, b in zip(before, args))}

    return run_cases(ctx, [(label, lambda f=function, k=key, kw=kwargs: run(f, inputs[k], kw))
                           for label, function, key, kwargs in CALLS])


# -- tests -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inputs():
    return make_inputs()


@pytest.fixture(scope="module")
def results(launch, inputs):
    return launch(rank_run_all, 1, args=(inputs,), backend="gloo", env=INTERPRET_ENV,
                  timeout=300).values[0]


def entry(results, label):
    """What the call `label` returned, or what it raised, raised here."""
    function = next(f for name, f, *_ in CALLS if name == label)
    return case_value(results[label], f"{function} ({label})")


def output(results, label):
    got = entry(results, label)
    assert not got["guard"], f"{label}: {got['guard']}"
    return got["out"]


@pytest.mark.points(1)
@pytest.mark.parametrize("function", [
    pytest.param(name, marks=pytest.mark.exercises(name), id=f"function={name}")
    for name in ("softmax", "rms_norm", "flash_attention", "paged_attention_decode")])
def test_wrappers_launch_kernels_and_keep_inputs(results, function):
    for label, *_ in (call for call in CALLS if call[1] == function):
        output(results, label)
        assert not entry(results, label)["inputs_changed"], (
            f"{label}: the wrapper modified an input; inputs are read-only")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_softmax_width_200(results, inputs):
    (x,) = inputs["softmax"]
    assert_close(output(results, "softmax"), torch.softmax(x.double(), -1).float(),
                 what="softmax on [5, 200]",
                 hint_first=True, hint="do the padded columns of the block load as -inf?")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_softmax_large_values(results, inputs):
    (x,) = inputs["softmax_large"]
    assert_close(output(results, "softmax_large"), torch.softmax(x.double(), -1).float(),
                 what="softmax on [3, 90] with values ~1e4",
                 hint_first=True, hint="subtract the row max before exp (README §3)")


@pytest.mark.exercises("rms_norm")
@pytest.mark.points(3)
def test_rms_norm_width_90(results, inputs):
    x, w = inputs["rms_norm"]
    xd = x.double()
    expected = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert_close(output(results, "rms_norm"), expected.float(), what="rms_norm on [4, 90]",
                 hint_first=True, hint="divide the sum of squares by 90, not by the block size")


@pytest.mark.exercises("flash_attention")
@pytest.mark.points(3)
def test_flash_attention_out_and_lse(results, inputs):
    out, lse = output(results, "attention")
    ref_out, ref_lse = attention_ref(*inputs["attention"], causal=False)
    assert_close(out, ref_out, what="flash_attention(q [1, 2, 37, 16]): out",
                 hint_first=True,
                 hint="rescale the accumulator when the running max changes (README §4)")
    assert_close(lse, ref_lse, what="flash_attention(q [1, 2, 37, 16]): lse",
                 hint_first=True, hint="lse = max + log(sum), natural log, float32")


@pytest.mark.exercises("flash_attention")
@pytest.mark.points(2)
def test_flash_attention_causal(results, inputs):
    out, lse = output(results, "attention_causal")
    ref_out, ref_lse = attention_ref(*inputs["attention"], causal=True)
    assert_close(out, ref_out, what="flash_attention(causal, q [1, 2, 37, 16]): out",
                 hint_first=True, hint="query i sees keys j <= i")
    assert_close(lse, ref_lse, what="flash_attention(causal, q [1, 2, 37, 16]): lse")


@pytest.mark.exercises("paged_attention_decode")
@pytest.mark.points(4)
def test_paged_attention_decode(results, inputs):
    assert_close(output(results, "paged"), paged_ref(*inputs["paged"]),
                 what="paged_attention_decode(lengths [1, 17, 8], block_size 8)",
                 hint_first=True,
                 hint="read block block_tables[b, t // block_size]; mask tokens past "
                      "context_lens[b] (README §5)")
