"""The harness on a GPU (skipped with a reason without CUDA): ranks see the device, results
come back as CPU tensors, and the backend follows the number of devices.

Multi-rank NCCL needs as many GPUs as ranks; on a machine with fewer, `auto` must fall back to
gloo (also tested by simulation on CPU in test_launcher.py).
"""

from __future__ import annotations

import pytest
import torch

from harness import launch
from harness.launcher import resolve_backend

pytestmark = pytest.mark.gpu


def rank_square_on_cuda(ctx, x: torch.Tensor) -> dict:
    y = x.to("cuda") ** 2
    return {"y": y, "device": y.device.type, "visible": torch.cuda.device_count()}


def rank_all_reduce(ctx) -> torch.Tensor:
    import torch.distributed as dist

    t = torch.full((3,), float(ctx.rank + 1), device="cuda")
    dist.all_reduce(t)
    return t


def rank_cpu_and_cuda_collectives(ctx) -> dict:
    """An NCCL rank's group also moves CPU tensors (over gloo): suites exchange both."""
    import torch.distributed as dist

    on_cpu = torch.full((2,), float(ctx.rank + 1))
    on_gpu = on_cpu.to("cuda")
    dist.all_reduce(on_cpu)
    dist.all_reduce(on_gpu)
    return {"cpu": on_cpu, "cuda": on_gpu, "backend": ctx.backend}


def rank_cpu_all_reduce(ctx) -> str:
    import torch.distributed as dist

    dist.all_reduce(torch.ones(2))
    return ctx.backend


def test_a_rank_computes_on_cuda_and_the_result_comes_back_on_the_cpu():
    x = torch.arange(6, dtype=torch.float32)
    got = launch(rank_square_on_cuda, world_size=1, args=(x,), impl="solutions",
                 timeout=120).values[0]
    assert got["device"] == "cuda" and got["visible"] == torch.cuda.device_count()
    assert got["y"].device.type == "cpu", "a rank's CUDA tensor must reach the parent on the CPU"
    assert torch.equal(got["y"], x ** 2)


def test_auto_backend_is_nccl_only_where_the_devices_cover_the_world():
    count = torch.cuda.device_count()
    assert resolve_backend("auto", count) == "nccl"
    assert resolve_backend("auto", count + 1) == "gloo"


def test_a_one_rank_nccl_group_runs_a_collective():
    got = launch(rank_all_reduce, world_size=1, backend="nccl", impl="solutions",
                 timeout=120).values[0]
    assert got.tolist() == [1.0, 1.0, 1.0]


def test_an_nccl_group_moves_cpu_tensors_too():
    got = launch(rank_cpu_and_cuda_collectives, world_size=1, backend="auto", impl="solutions",
                 timeout=120).values[0]
    assert got["backend"] == "nccl"
    assert got["cpu"].tolist() == got["cuda"].tolist() == [1.0, 1.0]


def test_a_sidecar_launch_stays_on_gloo_where_a_gpu_is_there():
    got = launch(rank_cpu_all_reduce, world_size=1, backend="auto", impl="solutions",
                 transport="sidecar", timeout=120)
    assert got.backend == "gloo" and got.wire is not None, (
        "the sidecar's wire log is the cost verdict: a GPU must not swap it for the in-rank log")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL between ranks needs >= 2 GPUs")
def test_two_ranks_all_reduce_over_nccl():
    got = launch(rank_all_reduce, world_size=2, backend="auto", impl="solutions",
                 timeout=120).values
    assert [t.tolist() for t in got] == [[3.0] * 3, [3.0] * 3]
