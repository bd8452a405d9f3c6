"""Triton kernels (the implementation under test) vs their torch counterparts: time ratios on a GPU.

Each kernel and its counterpart run alternately in one rank process on the same inputs, so
clock and thermal changes hit both alike; a repetition times `inner` back-to-back calls between
CUDA events, and the median over repetitions is reported:

    softmax                  [8192, 4096] float32   vs torch.softmax
    rms_norm                 [8192, 4096] float32   vs torch.nn.functional.rms_norm
    flash_attention          [4, 16, 2048, 64] fp16 vs scaled_dot_product_attention (causal
                                                       and not)
    paged_attention_decode   64 seqs x 1024 tokens  vs gathering the blocks + SDPA

    ratio = kernel time / torch time   (below 1: the Triton kernel is faster)

Printed, never asserted here (the hidden GPU tests grade these ratios with wide margins). On a
machine without a GPU the kernels could only run in Triton's interpreter, where timing says
nothing about a GPU, so the benchmark says so and exits 0.

    python -m grader bench triton_kernels [--impl solutions] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from grader.bench import add_impl_option


def _time_ms(fn: Callable[[], Any], inner: int) -> float:
    """Milliseconds per call of `fn`, over `inner` back-to-back calls between CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / inner


def _paged_inputs(device: torch.device, batch: int, heads: int, dim: int, tokens: int,
                  block_size: int) -> dict[str, torch.Tensor]:
    """A decode batch whose sequences own shuffled physical blocks of one shared cache."""
    blocks_per_seq = tokens // block_size
    num_blocks = batch * blocks_per_seq
    gen = torch.Generator(device="cpu").manual_seed(0)
    tables = torch.randperm(num_blocks, generator=gen).view(batch, blocks_per_seq)
    shape = (num_blocks, block_size, heads, dim)
    return {
        "q": torch.randn(batch, heads, dim, device=device, dtype=torch.float16),
        "k_cache": torch.randn(shape, device=device, dtype=torch.float16),
        "v_cache": torch.randn(shape, device=device, dtype=torch.float16),
        "block_tables": tables.to(device=device, dtype=torch.int32),
        "context_lens": torch.full((batch,), tokens, device=device, dtype=torch.int32),
    }


def _paged_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor) -> torch.Tensor:
    """The torch counterpart for full-length sequences: gather each sequence's blocks, SDPA."""
    batch, heads, dim = q.shape
    idx = block_tables.long()
    k = k_cache[idx].reshape(batch, -1, heads, dim).transpose(1, 2)
    v = v_cache[idx].reshape(batch, -1, heads, dim).transpose(1, 2)
    return F.scaled_dot_product_attention(q.unsqueeze(2), k, v).squeeze(2)


def benchmark_cases(kernels: Any, device: torch.device) -> dict[str, tuple[Callable, Callable]]:
    """Name -> (kernel call, torch call) on fixed inputs; both return the output tensor."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    rows = torch.randn(8192, 4096, generator=gen).to(device)
    weight = torch.randn(4096, generator=gen).to(device)
    qkv = [torch.randn(4, 16, 2048, 64, generator=gen).to(device, torch.float16)
           for _ in range(3)]
    q, k, v = qkv
    paged = _paged_inputs(device, batch=64, heads=16, dim=128, tokens=1024, block_size=16)
    return {
        "softmax": (lambda: kernels.softmax(rows), lambda: torch.softmax(rows, dim=-1)),
        "rms_norm": (lambda: kernels.rms_norm(rows, weight),
                     lambda: F.rms_norm(rows, (4096,), weight, eps=1e-6)),
        "flash_attention": (lambda: kernels.flash_attention(*qkv)[0],
                            lambda: F.scaled_dot_product_attention(q, k, v)),
        "flash_attention causal": (lambda: kernels.flash_attention(*qkv, causal=True)[0],
                                   lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        "paged_attention_decode": (lambda: kernels.paged_attention_decode(**paged),
                                   lambda: _paged_torch(**paged)),
    }


def bench_rank(ctx, names: list[str] | None = None, repeats: int = 15, inner: int = 10,
               warmup: int = 2) -> dict[str, dict[str, float]]:
    """Rank function (GPU): per case, median ms of kernel and torch, their ratio, max |Δ|."""
    kernels = ctx.impl_module("triton_kernels", "kernels")
    device = torch.device("cuda", torch.cuda.current_device())
    cases = benchmark_cases(kernels, device)
    results: dict[str, dict[str, float]] = {}
    for name, (kernel_call, torch_call) in cases.items():
        if names and name not in names:
            continue
        diff = (kernel_call().float() - torch_call().float()).abs().max().item()
        kernel_ms, torch_ms = [], []
        for repetition in range(warmup + repeats):
            k_ms, t_ms = _time_ms(kernel_call, inner), _time_ms(torch_call, inner)
            if repetition >= warmup:
                kernel_ms.append(k_ms)
                torch_ms.append(t_ms)
        kernel_med, torch_med = statistics.median(kernel_ms), statistics.median(torch_ms)
        results[name] = {"kernel_ms": kernel_med, "torch_ms": torch_med,
                         "ratio": kernel_med / torch_med, "max_abs_diff": diff}
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench triton_kernels",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("need --repeats >= 1")
    if not torch.cuda.is_available():
        print("triton_kernels bench: no CUDA GPU here. Without one the kernels run in Triton's "
              "interpreter (TRITON_INTERPRET=1), which executes every program one after the "
              "other with numpy: its timings say nothing about a GPU, so nothing is measured. "
              "Run this on a machine with a GPU.")
        return 0

    from harness import launch
    from harness.errors import LaunchError

    print(f"triton_kernels bench: impl={args.impl.text}, {torch.cuda.get_device_name()}, "
          f"median of {args.repeats}")
    try:
        result = launch(bench_rank, 1, kwargs={"repeats": args.repeats}, impl=args.impl,
                        timeout=args.timeout, env={"TRITON_INTERPRET": "0"})
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    header = f"{'kernel':<24} {'triton ms':>10} {'torch ms':>10} {'ratio':>7} {'max |Δ|':>9}"
    print(header)
    print("-" * len(header))
    for name, row in result.values[0].items():
        print(f"{name:<24} {row['kernel_ms']:>10.3f} {row['torch_ms']:>10.3f} "
              f"{row['ratio']:>6.2f}x {row['max_abs_diff']:>9.2e}")
    print("ratio = Triton time / torch time; below 1 the Triton kernel is faster.")
    return 0
