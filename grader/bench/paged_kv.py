"""Paged KV cache: allocator ops/s, memory vs max-length preallocation, paged vs dense attention.

Everything runs in one harness rank with the implementation under test (`--impl`):

1. Memory. A batch of `--requests` requests whose lengths (prompt + output) are drawn from a
   long-tailed distribution (log-normal, capped at `--max-len`) is admitted at once; each
   prompt is allocated, then every request decodes its output with `append_slot`, and the
   blocks in use at the peak are compared with reserving `max_len` slots per request (what a
   contiguous cache must do when the output length is unknown) and with the exact token
   count. Three variants: plain paging; every prompt starting with the same
   `--shared-prompt` tokens, through `PrefixCachingAllocator.allocate_prompt`; and parallel
   sampling, `--samples` outputs per prompt through `fork` against separate copies.
2. Allocator speed: operations per second over the runs above (allocate / allocate_prompt,
   append_slot, fork, free), with a reminder of what one decode step costs per sequence.
3. Attention. `paged_attention` over a shuffled block pool against dense attention over a
   padded contiguous cache (`scaled_dot_product_attention` with a mask), for a batch of
   long-tailed context lengths; interleaved, median of `--repeats`, as a ratio.

Printed, never asserted. Byte figures use a 70B-class GQA model (80 layers, 8 KV heads, head
dim 128, fp16: 320 KiB per token).

    python -m grader bench paged_kv [--impl solutions] [--requests 256] [--max-len 4096]
                                    [--block-size 16] [--shared-prompt 1024] [--samples 4]
                                    [--batch 32] [--repeats 10]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch

from grader.bench import add_impl_option

BYTES_PER_TOKEN = 2 * 80 * 8 * 128 * 2  # K and V, layers, KV heads, head dim, fp16 bytes


def draw_lengths(count: int, median: float, sigma: float, cap: int, seed: int) -> list[int]:
    """Log-normal lengths >= 1, capped: most are short, a few are long."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.empty(count, dtype=torch.float64).log_normal_(math.log(median), sigma,
                                                                 generator=gen)
    return [max(1, min(cap, int(v))) for v in values.tolist()]


def run_batch(alloc, prompts: list[list[int]], outputs: list[int], samples: int,
              use_prompt_cache: bool) -> dict:
    """Admit every request, decode every output, free; count ops, time and peak blocks."""
    ops, seq, live = 0, 0, []
    start = time.perf_counter()
    for prompt, out_len in zip(prompts, outputs, strict=True):
        if use_prompt_cache:
            alloc.allocate_prompt(seq, prompt)
        else:
            alloc.allocate(seq, len(prompt))
        group = [seq]
        for sample in range(1, samples):
            alloc.fork(seq, seq + sample)
            group.append(seq + sample)
        ops += samples
        live.append((group, out_len))
        seq += samples
    for step in range(max(outputs)):
        for group, out_len in live:
            if step < out_len:
                for s in group:
                    alloc.append_slot(s)
                ops += len(group)
        alloc.pop_copies()
    peak = alloc.num_blocks - alloc.num_free_blocks
    for group, _ in live:
        for s in group:
            alloc.free(s)
        ops += len(group)
    return {"peak_blocks": peak, "ops": ops, "seconds": time.perf_counter() - start}


def memory_rank(mod, cfg: dict) -> dict:
    lens = draw_lengths(cfg["requests"], 300, 1.0, cfg["max_len"] // 2, seed=1)
    outs = draw_lengths(cfg["requests"], 150, 1.2, cfg["max_len"] // 2, seed=2)
    bs, shared = cfg["block_size"], cfg["shared_prompt"]
    vocab = iter(range(10**6, 10**9))
    plain = [[next(vocab) for _ in range(n)] for n in lens]
    system = [next(vocab) for _ in range(shared)]
    with_system = [system + p[:cfg["max_len"] - shared - o] for p, o in zip(plain, outs,
                                                                            strict=True)]
    pool = cfg["requests"] * cfg["samples"] * (cfg["max_len"] // bs + 1)
    results = {}
    for name, prompts, samples, cached in (("paged", plain, 1, False),
                                           ("shared prompt", with_system, 1, True),
                                           ("shared prompt, no cache", with_system, 1, False),
                                           ("samples", plain, cfg["samples"], False)):
        cls = mod.PrefixCachingAllocator if cached else mod.BlockAllocator
        run = run_batch(cls(pool, bs), prompts, outs, samples, cached)
        # Tokens held if every request (every sample) kept its own copy of everything.
        run["exact_tokens"] = samples * sum(len(p) + o for p, o in zip(prompts, outs,
                                                                      strict=True))
        run["requests"] = len(prompts) * samples
        results[name] = run
    return results


def attention_rank(cache, cfg: dict, device: torch.device) -> dict:
    bs, batch, heads, dim = cfg["block_size"], cfg["batch"], 8, 64
    lens = draw_lengths(batch, 400, 1.0, 2048, seed=3)
    needed = [-(-n // bs) for n in lens]
    num_blocks = sum(needed) + 8
    gen = torch.Generator().manual_seed(4)
    ids = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.full((batch, max(needed)), -1, dtype=torch.long)
    for b, n in enumerate(needed):
        tables[b, :n] = torch.tensor(ids[:n])
        ids = ids[n:]
    k_cache = torch.randn(num_blocks, bs, heads, dim, generator=gen)
    v_cache = torch.randn(num_blocks, bs, heads, dim, generator=gen)
    q = torch.randn(batch, heads, dim, generator=gen)
    # The dense side: the same keys/values in a padded contiguous cache [batch, heads, T, dim].
    max_len = max(lens)
    positions = torch.arange(max_len)
    slots = tables[:, positions // bs].clamp(min=0) * bs + positions % bs
    k_dense = k_cache.view(-1, heads, dim)[slots].transpose(1, 2).contiguous()
    v_dense = v_cache.view(-1, heads, dim)[slots].transpose(1, 2).contiguous()
    mask = (positions[None, :] < torch.tensor(lens)[:, None])[:, None, None, :]
    q, k_cache, v_cache, tables = (t.to(device) for t in (q, k_cache, v_cache, tables))
    k_dense, v_dense, mask = (t.to(device) for t in (k_dense, v_dense, mask))
    lens_t = torch.tensor(lens, device=device)

    def paged():
        return cache.paged_attention(q, k_cache, v_cache, tables, lens_t)

    def dense():
        return torch.nn.functional.scaled_dot_product_attention(
            q[:, :, None], k_dense, v_dense, attn_mask=mask)[:, :, 0]

    def timed(fn):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, out

    paged_s, dense_s = [], []
    for repeat in range(cfg["repeats"] + 2):
        (p_s, p_out), (d_s, d_out) = timed(paged), timed(dense)
        if repeat >= 2:  # warm-up
            paged_s.append(p_s)
            dense_s.append(d_s)
    return {"paged_s": statistics.median(paged_s), "dense_s": statistics.median(dense_s),
            "max_diff": float((p_out - d_out).abs().max()), "lens": lens,
            "device": str(device)}


def bench_rank(ctx, cfg: dict) -> dict:
    torch.manual_seed(0)
    allocator = ctx.impl_module("paged_kv", "allocator")
    cache = ctx.impl_module("paged_kv", "cache")
    return {"memory": memory_rank(allocator, cfg),
            "attention": attention_rank(cache, cfg, ctx.device)}


def _gib(tokens: float) -> str:
    return f"{tokens * BYTES_PER_TOKEN / 2**30:8.1f} GiB"


def report(cfg: dict, result: dict) -> None:
    memory, bs = result["memory"], cfg["block_size"]
    print(f"\nmemory at the peak ({cfg['requests']} requests, block_size {bs}, max_len "
          f"{cfg['max_len']}; GiB for 320 KiB/token):")
    header = (f"{'variant':<26}{'requests':>9}{'exact':>13}{'paged':>13}{'max-len':>13}"
              f"{'paged/max-len':>15}{'paged/exact':>13}")
    print(header)
    print("-" * len(header))
    for name, run in memory.items():
        paged_tokens = run["peak_blocks"] * bs
        prealloc = run["requests"] * cfg["max_len"]
        print(f"{name:<26}{run['requests']:>9}{_gib(run['exact_tokens'])}{_gib(paged_tokens)}"
              f"{_gib(prealloc)}{paged_tokens / prealloc:>14.3f}x"
              f"{paged_tokens / run['exact_tokens']:>12.3f}x")
    print("exact: every request holding its own copy of each token; max-len: max_len slots "
          "reserved per request")
    shared = memory["shared prompt"]["peak_blocks"] / memory["shared prompt, no cache"][
        "peak_blocks"]
    print(f"prefix caching: {shared:.3f}x the blocks of the same requests without it "
          f"({cfg['shared_prompt']}-token shared prompt)")
    fork_vs_copies = memory["samples"]["peak_blocks"] / (
        cfg["samples"] * memory["paged"]["peak_blocks"])
    print(f"forking: {cfg['samples']} samples per prompt hold {fork_vs_copies:.3f}x the blocks "
          f"of {cfg['samples']} independent copies")

    print("\nallocator speed (the implementation under test, Python):")
    for name, run in memory.items():
        rate = run["ops"] / run["seconds"]
        print(f"  {name:<26}{run['ops']:>9} ops  {rate / 1e6:6.2f} M ops/s  "
              f"({1e6 / rate:.2f} us per op)")

    att = result["attention"]
    lens = att["lens"]
    print(f"\npaged vs dense attention on {att['device']} (batch {cfg['batch']}, 8 heads, dim "
          f"64, block_size {bs}, context {min(lens)}..{max(lens)}, mean "
          f"{sum(lens) / len(lens):.0f}; median of {cfg['repeats']}):")
    print(f"  paged {att['paged_s'] * 1e3:8.3f} ms   dense (padded, SDPA) "
          f"{att['dense_s'] * 1e3:8.3f} ms   paged/dense {att['paged_s'] / att['dense_s']:.2f}x"
          f"   max |diff| {att['max_diff']:.2e}")
    if att["device"] == "cpu":
        print("  on CPU, materialising the gathered keys/values in fresh tensors dominates; a "
              "GPU kernel reads the blocks in place (triton_kernels)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench paged_kv",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--shared-prompt", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if min(args.requests, args.block_size, args.samples, args.batch, args.repeats) < 1 or \
            not 0 <= args.shared_prompt < args.max_len // 2:
        parser.error("counts must be >= 1 and 0 <= --shared-prompt < --max-len / 2")
    cfg = {"requests": args.requests, "max_len": args.max_len, "block_size": args.block_size,
           "shared_prompt": args.shared_prompt, "samples": args.samples, "batch": args.batch,
           "repeats": args.repeats}

    from harness import launch
    from harness.errors import LaunchError

    print(f"paged_kv bench: impl={args.impl.text}")
    try:
        result = launch(bench_rank, world_size=1, args=(cfg,), impl=args.impl,
                        timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    report(cfg, result)
    return 0
