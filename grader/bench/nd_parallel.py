"""A 2×2 (dp, tp) mesh against pure DP-4 and pure TP-4, on 4 ranks: time per step and the bytes
each rank sends on each axis, side by side in one launch.

One harness launch of 4 ranks with the sidecar transport. Every rank builds the (dp, tp) groups
of each layout (row-major, README §2), then, `--repeats` times after `--warmup`, trains the same
small residual MLP (README §4) with the submission's `train_2d` for `--steps` steps under each
layout in turn, each started together on every rank (barrier), so the three share the same
load. Reported per layout:

    ms/step        slowest rank's wall time of a train_2d call / steps (median over repeats)
    TP B/step      bytes one rank handed to its TP group per step (the sidecar's wire log)
    DP B/step      bytes one rank handed to its DP group per step (the wire log)
    time vs 2x2    ms/step over the 2×2 mesh's

The bytes come from outside the rank (the sidecars' logs), and follow README §8: DP carries
each rank's gradient shard once per step (all of it with DP-4, half of the TP-sharded weights
with 2×2), TP carries activations of [B/D, hidden] per block. Printed, never asserted: on a CPU
the ranks share cores and talk over loopback, so the times say little about GPUs; the bytes
are what the README predicts.

    python -m grader bench nd_parallel [--impl solutions] [--hidden 256] [--ffn 1024]
        [--blocks 4] [--batch 64] [--steps 4] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from grader.bench import add_impl_option

LAYOUTS = {"2x2 mesh": {"dp": 2, "tp": 2}, "DP-4": {"dp": 4, "tp": 1},
           "TP-4": {"dp": 1, "tp": 4}}


def _groups(shape: dict[str, int], axis: str) -> list[list[int]]:
    names = list(shape)
    i = names.index(axis)
    by_rest: dict[tuple[int, ...], list[int]] = {}
    for rank, coords in enumerate(itertools.product(*(range(n) for n in shape.values()))):
        by_rest.setdefault(coords[:i] + coords[i + 1:], []).append(rank)
    return sorted(by_rest.values(), key=lambda g: g[0])


def bench_rank(ctx: Any, cfg: dict) -> dict:
    train = ctx.impl_module("nd_parallel", "train")
    gen = torch.Generator().manual_seed(cfg["seed"])
    h, f = cfg["hidden"], cfg["ffn"]
    params = {}
    for i in range(cfg["blocks"]):
        params[f"{i}.w1"] = torch.randn(f, h, generator=gen) / math.sqrt(h)
        params[f"{i}.b1"] = torch.zeros(f)
        params[f"{i}.w2"] = torch.randn(h, f, generator=gen) / math.sqrt(f)
        params[f"{i}.b2"] = torch.zeros(h)
    x = torch.randn(cfg["steps"], cfg["batch"], h, generator=gen)
    y = torch.randn(cfg["steps"], cfg["batch"], h, generator=gen)
    groups: dict[str, dict[str, Any]] = {}
    for name, shape in LAYOUTS.items():
        mine: dict[str, Any] = {}
        for axis in shape:
            for members in _groups(shape, axis):
                group = ctx.new_group(members)
                if ctx.rank in members:
                    mine[axis] = group
        groups[name] = mine
    out: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    for rep in range(cfg["warmup"] + cfg["repeats"]):
        for name in LAYOUTS:
            dist.barrier()
            ctx.mark(f"{name}|{rep}")
            start = time.perf_counter()
            train.train_2d(params, x, y, lr=0.01, momentum=0.9, steps=cfg["steps"],
                           tp_group=groups[name]["tp"], dp_group=groups[name]["dp"])
            elapsed = time.perf_counter() - start
            ctx.mark("idle")
            if rep >= cfg["warmup"]:
                out[name].append(elapsed)
    return out


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader bench nd_parallel",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_impl_option(parser)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--quick", action="store_true",
                        help="a quick look: hidden 64, ffn 256, 2 blocks, 2 steps, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.ffn, args.blocks, args.steps, args.repeats, args.warmup = \
            64, 256, 2, 2, 1, 0
    return args


def main(argv: list[str]) -> int:
    from grader.report.render import format_table
    from harness import launch
    from harness.errors import LaunchError

    args = _parse(argv)
    cfg = {k: getattr(args, k) for k in ("hidden", "ffn", "blocks", "batch", "steps",
                                         "repeats", "warmup", "seed")}
    print(f"nd_parallel bench: impl={args.impl.text}, 4 ranks, gloo over the sidecar, float32 "
          f"MLP of {args.blocks} blocks {args.hidden}->{args.ffn}->{args.hidden}, batch "
          f"{args.batch}, {args.steps} steps; median of {args.repeats} (slowest rank)",
          flush=True)
    try:
        result = launch(bench_rank, 4, args=(cfg,), impl=args.impl, backend="gloo",
                        transport="sidecar", timeout=args.timeout)
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    wire = result.wire
    assert wire is not None, "the sidecar transport keeps a wire log"
    rows, base = [], None
    for name, shape in LAYOUTS.items():
        per_rep = [max(v[name][i] for v in result.values) for i in range(args.repeats)]
        ms = statistics.median(per_rep) / args.steps * 1e3
        base = base if base is not None else ms
        rank = 0
        wanted = {axis: next(tuple(g) for g in _groups(shape, axis) if rank in g)
                  for axis in shape}
        label = f"{name}|{args.warmup}"  # one measured repetition's traffic
        records = [w for w in wire[rank] if w.label == label]
        per_axis = {axis: sum(w.bytes for w in records if tuple(w.group_ranks) == g)
                    / args.steps for axis, g in wanted.items()}
        shown = {axis: "- (group of 1)" if shape[axis] == 1 else f"{per_axis[axis]:.0f}"
                 for axis in shape}
        rows.append([name, f"{ms:.2f}", shown["tp"], shown["dp"], f"{ms / base:.2f}x"])
    print()
    print(format_table(["layout", "ms/step", "TP B/step (rank 0)", "DP B/step (rank 0)",
                        "time vs 2x2"], rows))
    print("\nbytes are what rank 0 handed to each of its groups, from the sidecar's wire log "
          "(a group of 1 never\nreaches the network); README §8 predicts them.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
