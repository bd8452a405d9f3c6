"""mixed_precision: an MLP trained in fp32, bf16 + fp32 master, fp16 + your loss scaler, and fp8.

Everything runs side by side in one harness rank with the implementation under test (`--impl`):
the same 16-64-64-1 MLP, from the same initial weights and on the same mini-batches, trained
with Adam in five ways:

- fp32: plain nn.Linear, the reference;
- bf16 + master: bf16 weights and activations, `MasterWeightOptimizer` over fp32 copies;
- fp16 + scaler: fp32 weights, forward under CPU autocast in fp16, `DynamicLossScaler`;
- fp16, no scaler: the same without scaling, to show what underflow costs;
- fp8: `Fp8Linear` layers (E4M3 forward, E5M2 gradients, delayed scaling), emulated.

The loss is multiplied by a small factor (`--loss-factor`, default 1e-6) before backward: Adam
does not care (it divides by the gradients' own size), but the gradients now sit in and below
fp16's subnormals, as the activation gradients of a deep network do. Printed: final full-batch loss,
its ratio to fp32's, the prediction error against the fp32 model, skipped steps and the time
per step relative to fp32 (on a CPU fp8 is an emulation: slower, not faster). The loss curves
are drawn (`--plot`, default grading/bench/mixed_precision_loss.png). Printed, never asserted.

    python -m grader bench mixed_precision [--impl solutions] [--steps 300] [--small]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grader.bench import add_impl_option

DEFAULT_PLOT = Path("grading/bench/mixed_precision_loss.png")
SIZES = (16, 64, 64, 1)
VARIANTS = ("fp32", "bf16 + master", "fp16 + scaler", "fp16, no scaler", "fp8")


def _problem(cfg: dict) -> dict:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, SIZES[0], generator=gen)
    w = torch.randn(SIZES[0], 1, generator=gen)
    y = torch.tanh(x @ w / 4) + 0.1 * torch.sin(3 * x[:, :1])
    init = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = fan_in ** -0.5
        init.append(((torch.rand(fan_out, fan_in, generator=gen) * 2 - 1) * bound,
                     (torch.rand(fan_out, generator=gen) * 2 - 1) * bound))
    return {"x": x, "y": y, "init": init}


def _mlp(make: Any, init: list, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    layers = [make(a, b) for a, b in zip(SIZES[:-1], SIZES[1:])]
    with torch.no_grad():
        for layer, (w, b) in zip(layers, init):
            layer.weight.copy_(w)
            layer.bias.copy_(b)
    return nn.Sequential(layers[0], nn.GELU(), layers[1], nn.GELU(), layers[2]).to(dtype)


def _train(amp: Any, variant: str, prob: dict, cfg: dict) -> dict:
    x, y, lr = prob["x"], prob["y"], cfg["lr"]
    dtype = torch.bfloat16 if variant == "bf16 + master" else torch.float32
    model = _mlp(amp.Fp8Linear if variant == "fp8" else nn.Linear, prob["init"], dtype)
    scaler = amp.DynamicLossScaler() if variant == "fp16 + scaler" else None
    if variant == "bf16 + master":
        master = amp.MasterWeightOptimizer(model.parameters(),
                                           lambda ps: torch.optim.Adam(ps, lr=lr))
        opt: Any = master
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    fp16 = variant.startswith("fp16")

    def forward(inp: torch.Tensor) -> torch.Tensor:
        if fp16:
            with torch.autocast("cpu", dtype=torch.float16):
                return model(inp).float()
        return model(inp.to(dtype)).float()

    losses, skipped = [], 0
    start = time.perf_counter()
    for step in range(cfg["steps"]):
        idx = torch.arange(step * 64, (step + 1) * 64) % x.shape[0]
        mse = ((forward(x[idx]) - y[idx]) ** 2).mean()
        loss = mse * cfg["loss_factor"]
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            skipped += 0 if scaler.step(opt) else 1
            scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(float(mse))
    seconds = (time.perf_counter() - start) / cfg["steps"]
    with torch.no_grad():
        pred = forward(x)
    return {"losses": losses, "final": float(((pred - y) ** 2).mean()), "pred": pred,
            "skipped": skipped, "step_s": seconds}


def bench_rank(ctx: Any, cfg: dict) -> dict:
    amp = ctx.impl_module("mixed_precision", "amp")
    prob = _problem(cfg)
    return {v: _train(amp, v, prob, cfg) for v in VARIANTS}


def plot(result: dict, path: Path, scale: float) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for variant, row in result.items():
        ax.plot(row["losses"], label=variant, alpha=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("mini-batch MSE")
    ax.set_title(f"16-64-64-1 MLP, Adam, loss x {scale:g} before backward")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench mixed_precision",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--small", action="store_true", help="40 steps: a quick look")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--loss-factor", type=float, default=1e-6)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    steps = 40 if args.small else args.steps
    if steps < 1:
        parser.error("need --steps >= 1")

    from harness import launch
    from harness.errors import LaunchError

    cfg = {"steps": steps, "lr": args.lr, "loss_factor": args.loss_factor}
    try:
        result = launch(bench_rank, world_size=1, args=(cfg,), impl=args.impl,
                        timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    ref = result["fp32"]
    print(f"mixed_precision bench: impl={args.impl.text}, {steps} Adam steps, lr {args.lr:g}, "
          f"loss x {args.loss_factor:g} before backward")
    header = (f"{'variant':<16} {'final loss':>11} {'/ fp32':>8} {'pred err':>9} "
              f"{'skipped':>8} {'time / fp32':>12}")
    print(header)
    print("-" * len(header))
    for variant, row in result.items():
        err = float((row["pred"] - ref["pred"]).norm() / ref["pred"].norm())
        print(f"{variant:<16} {row['final']:>11.3e} {row['final'] / ref['final']:>7.2f}x "
              f"{err:>9.2e} {row['skipped']:>8} {row['step_s'] / ref['step_s']:>11.2f}x")
    print("pred err = |pred - pred_fp32| / |pred_fp32| over the full batch; time / fp32 is the "
          "time per step relative to fp32, measured in this run (fp8 is emulated on a CPU).")
    print(plot(result, args.plot, args.loss_factor))
    return 0
