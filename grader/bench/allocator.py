"""Caching allocator: device calls and driver time with vs without a cache, on a training trace.

Everything runs in one harness rank with the implementation under test (`--impl`), on the
provided fake device. A training trace (the parameters of a small transformer, then `--steps`
steps of forward activations and temporaries, backward gradients handed to a communication
stream, and the optimizer step; the token count varies from step to step) is played twice:

1. through `CachingAllocator` (the implementation under test);
2. through no cache at all: every malloc is a `device.malloc` of the rounded size, every free a
   `device.free` (what a framework without a caching allocator does).

Printed side by side, from the same run: requests, device mallocs and frees, the driver time
those calls would cost at `--malloc-us` / `--free-us` per call (the fake device is free, so
this is a model: a real `cudaFree` also synchronises the device), the Python time the
allocator itself took, and the peak allocated and reserved bytes. A PNG of reserved against
allocated bytes over the trace is written to `--plot` when matplotlib is installed.

    python -m grader bench allocator [--impl solutions] [--layers 12] [--hidden 1024]
                                     [--steps 5] [--small] [--plot PATH]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from grader.bench import add_impl_option

MIB = 1 << 20
DEFAULT_PLOT = Path("grading") / "bench" / "allocator_reserved.png"


def training_trace(layers: int, hidden: int, steps: int, seed: int) -> list[tuple]:
    """("malloc", tag, bytes, stream) / ("free", tag) / ("record", tag, stream) /
    ("launch", stream) / ("complete", stream) operations of a training loop."""
    rng = random.Random(seed)
    ops: list[tuple] = []
    tags = iter(range(10**9))

    def malloc(size: int) -> int:
        tag = next(tags)
        ops.append(("malloc", tag, size, 0))
        return tag

    params = [malloc(4 * hidden * hidden * 2) for _ in range(layers)]
    state: list[int] = []
    for step in range(steps):
        tokens = hidden * rng.choice((3, 4, 5, 6))
        saved = []
        for _ in range(layers):
            saved.append([malloc(tokens * 2 * 4), malloc(tokens * 2 * 4 * 4), malloc(4 * tokens)])
            tmp = malloc(tokens * 2 * 4 * 4)
            ops.append(("free", tmp))
        grads = []
        for layer in reversed(range(layers)):
            g_act = malloc(tokens * 2 * 4)
            g_w = malloc(4 * hidden * hidden * 2)
            ops += [("free", t) for t in saved[layer]] + [("free", g_act)]
            ops += [("record", g_w, 1), ("launch", 1)]
            grads.append(g_w)
        if step == 0:
            state = [malloc(4 * hidden * hidden * 4) for _ in range(layers)]
        ops.append(("complete", 1))
        ops += [("free", g) for g in grads]
    ops += [("free", t) for t in params + state]
    return ops


class NoCache:
    """Every malloc a device.malloc of the rounded size, every free a device.free."""

    def __init__(self, device) -> None:
        self.device = device
        self.sizes: dict[int, int] = {}

    def malloc(self, size: int, stream: int = 0) -> int:
        rounded = -(-size // 512) * 512
        ptr = self.device.malloc(rounded)
        self.sizes[ptr] = rounded
        return ptr

    def free(self, ptr: int) -> None:
        del self.sizes[ptr]
        self.device.free(ptr)

    def record_stream(self, ptr: int, stream: int) -> None:
        pass  # device.free synchronises: nothing can still use the memory


def play(alloc, device, ops: list[tuple]) -> dict:
    import time

    ptrs: dict = {}
    allocated, reserved = [], []
    live = 0
    sizes: dict = {}
    start = time.perf_counter()
    for op in ops:
        kind = op[0]
        if kind == "malloc":
            ptrs[op[1]] = alloc.malloc(op[2], op[3])
            sizes[op[1]] = op[2]
            live += op[2]
        elif kind == "free":
            alloc.free(ptrs.pop(op[1]))
            live -= sizes.pop(op[1])
        elif kind == "record":
            alloc.record_stream(ptrs[op[1]], op[2])
        elif kind == "launch":
            device.launch(op[1])
        elif kind == "complete":
            device.complete(op[1])
        allocated.append(live)
        reserved.append(device.used_bytes)
    seconds = time.perf_counter() - start
    return {"requests": sum(op[0] == "malloc" for op in ops), "seconds": seconds,
            "mallocs": device.num_malloc_calls - device.num_malloc_failures,
            "frees": device.num_free_calls, "requested": allocated, "reserved": reserved}


def bench_rank(ctx, cfg: dict) -> dict:
    from assignments.allocator.device import FakeDevice

    mod = ctx.impl_module("allocator", "caching_allocator")
    ops = training_trace(cfg["layers"], cfg["hidden"], cfg["steps"], seed=0)
    out = {}
    for name, make in (("caching", mod.CachingAllocator), ("no cache", NoCache)):
        device = FakeDevice(1 << 50)
        out[name] = play(make(device), device, ops)
    return out


def report(cfg: dict, result: dict) -> None:
    malloc_us, free_us = cfg["malloc_us"], cfg["free_us"]
    print(f"training trace: {cfg['layers']} layers, hidden {cfg['hidden']}, {cfg['steps']} "
          f"steps; driver time modelled at {malloc_us:g} us per malloc, {free_us:g} us per free")
    header = (f"{'allocator':<10} {'requests':>9} {'dev mallocs':>12} {'dev frees':>10} "
              f"{'driver ms':>10} {'python ms':>10} {'peak req MiB':>13} {'peak res MiB':>13}")
    print(header)
    print("-" * len(header))
    driver = {}
    for name, r in result.items():
        driver[name] = (r["mallocs"] * malloc_us + r["frees"] * free_us) / 1000
        print(f"{name:<10} {r['requests']:>9} {r['mallocs']:>12} {r['frees']:>10} "
              f"{driver[name]:>10.1f} {r['seconds'] * 1000:>10.1f} "
              f"{max(r['requested']) / MIB:>13.1f} {max(r['reserved']) / MIB:>13.1f}")
    cached, plain = result["caching"], result["no cache"]
    calls = plain["mallocs"] / max(1, cached["mallocs"])
    time_ratio = driver["no cache"] / max(1e-9, driver["caching"])
    print(f"\ndevice mallocs, no cache / caching: {calls:.1f}x; modelled driver time ratio: "
          f"{time_ratio:.1f}x")
    print(f"memory the cache holds beyond the requests at its peak: "
          f"{max(cached['reserved']) / max(1, max(cached['requested'])):.2f}x the peak request "
          f"bytes (no cache: {max(plain['reserved']) / max(1, max(plain['requested'])):.2f}x)")


def plot(path: Path, result: dict) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    cached = result["caching"]
    ax.plot([b / MIB for b in cached["reserved"]], label="reserved (caching allocator)")
    ax.plot([b / MIB for b in result["no cache"]["reserved"]], label="reserved (no cache)",
            linestyle=":")
    ax.plot([b / MIB for b in cached["requested"]], label="requested bytes live", alpha=0.7)
    ax.set_xlabel("operation")
    ax.set_ylabel("MiB")
    ax.set_title("Reserved vs requested bytes over a training trace")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench allocator",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--malloc-us", type=float, default=50.0)
    parser.add_argument("--free-us", type=float, default=50.0)
    parser.add_argument("--small", action="store_true", help="2 layers, hidden 256, 2 steps")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.small:
        args.layers, args.hidden, args.steps = 2, 256, 2
    if min(args.layers, args.hidden, args.steps) < 1:
        parser.error("--layers, --hidden and --steps must be >= 1")
    cfg = {"layers": args.layers, "hidden": args.hidden, "steps": args.steps,
           "malloc_us": args.malloc_us, "free_us": args.free_us}

    from harness import launch
    from harness.errors import LaunchError

    print(f"allocator bench: impl={args.impl.text}")
    try:
        result = launch(bench_rank, world_size=1, args=(cfg,), impl=args.impl,
                        timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    report(cfg, result)
    print(plot(args.plot, result))
    return 0
