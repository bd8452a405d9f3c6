"""gpt: your attention vs F.scaled_dot_product_attention, and generate with vs without the KV cache.

Everything runs in one harness rank with the implementation under test (`--impl`), on the GPU
when there is one, else on the CPU:

1. Attention. `model.attention(q, k, v, causal=True)` against
   `F.scaled_dot_product_attention(..., is_causal=True)` (K/V heads expanded for it) on
   [batch, heads, T, head_dim] inputs with grouped K/V heads, for growing T. The two run
   interleaved, median of `--repeats`; the ratio is yours over torch's (the fused kernel also
   never materialises the [T, T] scores).
2. Generation. `GPT.generate` greedy, with and without the KV cache, from an 8-token prompt to
   growing lengths. Without the cache each step recomputes the whole sequence (O(T²) work for
   T tokens, O(T³) in attention); with it, each step runs one token. Printed as a table and
   drawn (`--plot`, default grading/bench/gpt_generate.png) as time against length.

Printed, never asserted.

    python -m grader bench gpt [--impl solutions] [--repeats 5] [--plot PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from grader.bench import add_impl_option

ATTENTION_LENGTHS = (128, 256, 512, 1024)
GENERATE_LENGTHS = (32, 64, 128, 256)
DEFAULT_PLOT = Path("grading/bench/gpt_generate.png")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def bench_rank(ctx, cfg: dict) -> dict:
    import torch.nn.functional as F

    from assignments.gpt.config import GPTConfig

    model = ctx.impl_module("gpt", "model")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)
    attention = []
    batch, heads, kv_heads, head_dim = 4, 8, 2, 64
    for length in ATTENTION_LENGTHS:
        q = torch.randn(batch, heads, length, head_dim, generator=gen).to(device, dtype)
        k = torch.randn(batch, kv_heads, length, head_dim, generator=gen).to(device, dtype)
        v = torch.randn(batch, kv_heads, length, head_dim, generator=gen).to(device, dtype)
        group = heads // kv_heads
        ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

        def mine(q=q, k=k, v=v):
            return model.attention(q, k, v, causal=True)

        def torchs(q=q, k=ke, v=ve):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        error = float((mine().float() - torchs().float()).abs().max())
        times: dict[str, list[float]] = {"mine": [], "torch": []}
        for _ in range(cfg["repeats"]):
            times["mine"].append(_timed(mine, device))
            times["torch"].append(_timed(torchs, device))
        mine_s, torch_s = (statistics.median(times[k]) for k in ("mine", "torch"))
        attention.append({"length": length, "mine_ms": mine_s * 1e3, "torch_ms": torch_s * 1e3,
                          "ratio": mine_s / torch_s, "max_abs_diff": error})
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=256, dim=128, n_layers=4, n_heads=4, n_kv_heads=2,
                       max_seq_len=max(GENERATE_LENGTHS) + 8)
    gpt = model.GPT(config).to(device).eval()
    prompt = torch.randint(0, 256, (1, 8), generator=gen).to(device)
    generate = []
    for new in GENERATE_LENGTHS:
        outputs: dict[bool, torch.Tensor] = {}

        def run(use_cache: bool, new: int = new, outputs: dict = outputs) -> None:
            outputs[use_cache] = gpt.generate(prompt, new, temperature=0.0, use_cache=use_cache)

        cached = _timed(lambda: run(True), device)
        full = _timed(lambda: run(False), device)
        same = bool(torch.equal(outputs[True], outputs[False]))
        generate.append({"length": 8 + new, "cache_s": cached, "full_s": full,
                         "ratio": full / cached, "same_tokens": same})
    return {"device": str(device), "dtype": str(dtype), "attention": attention,
            "generate": generate}


def plot(rows: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    lengths = [r["length"] for r in rows]
    ax.plot(lengths, [r["full_s"] for r in rows], "o-", label="use_cache=False (recompute)")
    ax.plot(lengths, [r["cache_s"] for r in rows], "o-", label="use_cache=True (KV cache)")
    ax.set_xlabel("sequence length after generation (tokens)")
    ax.set_ylabel("seconds for the whole generation")
    ax.set_title("GPT.generate, greedy, 8-token prompt")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench gpt",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("need --repeats >= 1")

    from harness import launch
    from harness.errors import LaunchError

    try:
        result = launch(bench_rank, world_size=1, args=({"repeats": args.repeats},),
                        impl=args.impl, timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"gpt bench: impl={args.impl.text}, {result['device']}, {result['dtype']}, median of "
          f"{args.repeats}")
    print("\nattention, batch 4, 8 query heads over 2 K/V heads, head_dim 64, causal:")
    header = f"{'T':>6} {'yours ms':>10} {'sdpa ms':>10} {'ratio':>7} {'max |Δ|':>9}"
    print(header)
    print("-" * len(header))
    for row in result["attention"]:
        print(f"{row['length']:>6} {row['mine_ms']:>10.3f} {row['torch_ms']:>10.3f} "
              f"{row['ratio']:>6.2f}x {row['max_abs_diff']:>9.2e}")
    print("ratio = your attention's time / F.scaled_dot_product_attention's; above 1 torch's "
          "fused kernel is faster.")
    print("\ngenerate (greedy), GPT dim 128, 4 layers, from an 8-token prompt:")
    header = f"{'length':>6} {'cache s':>9} {'no cache s':>11} {'ratio':>7} {'same tokens':>12}"
    print(header)
    print("-" * len(header))
    for row in result["generate"]:
        print(f"{row['length']:>6} {row['cache_s']:>9.3f} {row['full_s']:>11.3f} "
              f"{row['ratio']:>6.2f}x {str(row['same_tokens']):>12}")
    print("ratio = time without the cache / time with it; it grows with the length.")
    print(plot(result["generate"], args.plot))
    return 0
