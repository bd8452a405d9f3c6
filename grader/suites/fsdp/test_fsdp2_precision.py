"""Part 2, mixed precision (4 ranks, in-rank transport: the sidecar does not sum bf16).

The production policy (bf16 parameters, fp32 gradient reduction) must compute in bf16 — the
output is bf16, within bf16's bound of the float64 reference — and must reduce in fp32: in
"mp reduce" rank 0's gradient is [256, 3] and the others' [1, 1]; their fp32 mean is exactly
[64.75, 1.5], which a bf16 sum (256 + 1 = 256 in bf16) cannot produce.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close, bound
from grader.suites.fsdp._cases import REDUCE_MEAN, case4, ckpt4
from grader.suites.fsdp._ranks import F2_BLOCKS, IN, WIDTH, build_f2
from harness.cases import where

pytestmark = pytest.mark.exercises("shard_model")

# Roundings along the forward: the bf16 input, each of embed, 3 x (matmul, tanh, add), head,
# matmuls accumulated over up to WIDTH terms; backward doubles it.
FORWARD_DEPTH = 2 + 3 * F2_BLOCKS + 2 + max(IN, WIDTH)


def reference(x: torch.Tensor, y: torch.Tensor, seed: int, rank_rows: slice):
    model = build_f2(seed, torch.float64)
    out = model(x.double())
    ((out - y.double()) ** 2).mean().backward()
    return out[rank_rows].detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.points(2)
def test_bf16_parameters_compute_in_bf16(launch, impl):
    for rank, dtype in enumerate(case4(launch, impl, "mp param only")):
        assert dtype == "torch.bfloat16", (
            f"{where(rank, 4)} with param_dtype=bf16 alone the output is {dtype}: pass a "
            f"MixedPrecisionPolicy when either dtype is given (the other one None)")
    got = case4(launch, impl, "mp values")
    _, refs = ckpt4(launch, impl)
    x, y = refs["x"][0], refs["y"][0]
    rows = x.shape[0] // 4
    for rank, value in enumerate(got):
        out = value["out"]
        assert out.dtype == torch.bfloat16, (
            f"{where(rank, 4)} the model's output is {out.dtype}; with param_dtype=bf16 the "
            f"forward computes in bf16: pass mp_policy=MixedPrecisionPolicy(...) to fully_shard")
        assert value["param_dtypes"] == ["torch.float32"], (
            f"{where(rank, 4)} sharded parameters are {value['param_dtypes']}; the optimizer "
            f"keeps fp32 shards, only the gathered copies are bf16")
        ref_out, ref_grads = reference(x, y, refs["seed"], slice(rank * rows, (rank + 1) * rows))
        tol = bound(torch.bfloat16, depth=FORWARD_DEPTH, magnitude=float(ref_out.abs().max()))
        assert_close(out.double(), ref_out, dtype=torch.float64, tol=tol,
                     what=f"{where(rank, 4)} bf16 forward output")
        for name, grad in value["grads"].items():
            gtol = bound(torch.bfloat16, depth=2 * FORWARD_DEPTH,
                         magnitude=float(ref_grads[name].abs().max()))
            assert_close(grad.double(), ref_grads[name], dtype=torch.float64, tol=gtol,
                         what=f"{where(rank, 4)} gradient of {name} (bf16 compute)")


@pytest.mark.points(4)
def test_gradients_reduced_in_fp32(launch, impl):
    got = case4(launch, impl, "mp reduce")
    for rank, grad in enumerate(got):
        assert grad == REDUCE_MEAN, (
            f"{where(rank, 4)} reduction in bf16? the averaged gradient is {grad}, exactly "
            f"{REDUCE_MEAN} when reduced in fp32 (256 + 1 + 1 + 1 is not representable in "
            f"bf16): reduce_dtype=torch.float32")
