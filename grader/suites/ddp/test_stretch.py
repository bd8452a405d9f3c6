"""Stretch: the bf16 communication hook on 2 ranks, float32 parameters, 2 buckets.

The sidecars' log must show each bucket all-reduced once in bfloat16 (half its float32
bytes); the gradients must equal the float64 average of the ranks' gradients within the bound
of N bf16 roundings and N-1 bf16 additions (README §9, Tolerances).
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close, sum_bound
from grader.suites.ddp._cases import BF16, pure, wrapper2
from grader.suites.ddp._ref import allreduces, local_grads, pack_with_bytes
from harness.cases import where

pytestmark = pytest.mark.exercises("DistributedDataParallel", "bf16_compress_hook")


@pytest.fixture(scope="module")
def run(launch, impl):
    return wrapper2(launch, impl.text)


@pytest.mark.points(2)
def test_bf16_hook_halves_the_bytes(run):
    run.values("bf16", "register_comm_hook(bf16_compress_hook)")
    expected = [size // 2 for _, size in pack_with_bytes(BF16)]
    for rank in range(run.world_size):
        by_label = run.wire_by_label(rank)
        got = allreduces(by_label.get("bf16 step 0", []) + by_label.get("bf16 step 0 tap", []))
        sizes = [r.bytes for r in got]
        assert all(r.dtype == "bfloat16" for r in got) and sizes == expected, (
            f"{where(rank, run.world_size)} one bfloat16 all-reduce per bucket, {expected} "
            f"bytes (half of float32) — got all-reduces of {sizes} bytes in "
            f"{sorted({r.dtype for r in got})}")


@pytest.mark.points(2)
def test_bf16_hook_gradients_within_bf16_rounding(run):
    values = run.values("bf16", "register_comm_hook(bf16_compress_hook)")
    data = run.inputs["bf16"]
    spec64 = dict(BF16, dtype="float64")
    rows = data["x"].shape[1] // run.world_size
    x, y = data["x"].to(torch.float64), data["y"].to(torch.float64)
    per_rank = [local_grads(spec64, data["seed"], x[0, r * rows:(r + 1) * rows],
                            y[0, r * rows:(r + 1) * rows]) for r in range(run.world_size)]
    for rank, value in enumerate(values):
        for name in per_rank[0]:
            expected = sum(g[name] for g in per_rank) / run.world_size
            magnitude = float(sum(g[name].abs() for g in per_rank).max()) / run.world_size
            tol = sum_bound(torch.bfloat16, run.world_size + 1, magnitude=magnitude)
            assert_close(value["grads"][name], expected, dtype=torch.float32, tol=tol,
                         what=f"{where(rank, run.world_size)} {name}.grad with the bf16 hook",
                         hint="all-reduce a bfloat16 copy, convert back, divide by N")


@pytest.mark.points(1)
def test_bf16_hook_is_asynchronous_and_waited_on(run):
    values = run.values("bf16", "register_comm_hook(bf16_compress_hook)")
    buckets = len(pack_with_bytes(BF16))
    for rank, value in enumerate(values):
        early = value["waits"].get("bf16 step 0", 0)
        assert early == 0, (
            f"{where(rank, run.world_size)} the bf16 hook waited {early} time(s) before "
            f"backward reached the first layer; launch with async_op=True and wait in finish()")
        done = sum(value[kind].get(label, 0) for kind in ("waits", "futures")
                   for label in ("bf16 step 0", "bf16 step 0 tap"))
        assert done >= buckets, (
            f"{where(rank, run.world_size)} {done} handle(s) waited on for {buckets} buckets; "
            f"finish() waits on its all-reduce before it reads the result")


@pytest.mark.points(1)
def test_bf16_hook_without_a_process_group(launch, impl):
    run = pure(launch, impl.text)
    got = run.values("no_group_bf16", "bf16_compress_hook without a process group")[0]
    data = run.inputs["no_group_bf16"]
    spec64 = dict(BF16, dtype="float64")
    expected = local_grads(spec64, data["seed"], data["x"][0].double(), data["y"][0].double())
    for name, ref in expected.items():
        tol = sum_bound(torch.bfloat16, 2, magnitude=float(ref.abs().max()))
        assert_close(got["grads"][name], ref, dtype=torch.float32, tol=tol,
                     what=f"[no process group] {name}.grad with the bf16 hook",
                     hint="with no process group the hook communicates nothing")
