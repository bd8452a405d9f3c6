"""framework: a small MLP eager, under Dynamo alone, under inductor, and under your backend.

One harness rank with the implementation under test (`--impl`) runs, side by side on the same
weights and inputs, a small MLP whose blocks are `relu(x * sigmoid(x) @ W + residual)`:

- eager: plain PyTorch, every operator through Python and the dispatcher;
- dynamo + eager backend: the graph captured, run op by op (what capture alone costs or saves);
- inductor: `torch.compile(model)`, fused generated kernels, run here in the bench's own
  process with one thread (inductor calls a C compiler in a subprocess, which a harness rank
  would be stopped for as stalled); its ratio is to eager timed in the same process. The first
  compile takes tens of seconds on a CPU; a failure is reported with its reason;
- your backend: `compile_model(model, fusing_backend)`, the graph with your two rewrites.

Printed: the compile time of each, the time per call relative to eager (measured in this run,
medians of `--repeats` calls), the FLOPs of one call counted by your `FlopCounter` and the
GFLOP/s they make, and how many silu / add_relu nodes your pass put in the graph. Printed,
never asserted. `--quick` runs fewer repeats on a smaller model and skips inductor.

    python -m grader bench framework [--impl solutions] [--quick] [--repeats 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
from torch import nn

from grader.bench import add_impl_option

ID = "framework"


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = x * torch.sigmoid(x)  # becomes silu(x)
        return torch.relu(self.linear(gated) + x)  # becomes add_relu(linear(.), x)


def _model(width: int, depth: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[_Block(width) for _ in range(depth)])


def _time(fn: Any, x: torch.Tensor, repeats: int) -> float:
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_rank(ctx: Any, cfg: dict, x: torch.Tensor) -> dict:
    import torch._dynamo

    friendly = ctx.impl_module(ID, "compile_friendly")
    fusion = ctx.impl_module(ID, "fx_fusion")
    flops = ctx.impl_module(ID, "flops")
    model = _model(cfg["width"], cfg["depth"])
    with torch.no_grad(), flops.FlopCounter() as counter:
        reference = model(x)
    rows: dict[str, dict] = {"eager": {"compile_s": 0.0, "call_s": _time(model, x, cfg["repeats"])}}
    kinds: list[str] = []

    def counting_fusion(gm: Any, example_inputs: list) -> Any:
        out = fusion.fusing_backend(gm, example_inputs)
        kinds.extend(str(getattr(n.target, "__name__", n.target)) for n in out.graph.nodes)
        return out

    backends = [("dynamo + eager backend", "eager"), ("your fusing_backend", counting_fusion)]
    for name, backend in backends:
        torch._dynamo.reset()
        try:
            run = friendly.compile_model(model, backend)
            start = time.perf_counter()
            with torch.no_grad():
                out = run(x)
            compile_s = time.perf_counter() - start
            err = float((out - reference).abs().max())
            rows[name] = {"compile_s": compile_s, "call_s": _time(run, x, cfg["repeats"]),
                          "max_err": err}
        except Exception as exc:  # noqa: BLE001  (a missing C compiler, a stub: report it)
            rows[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
    torch._dynamo.reset()
    return {"rows": rows, "flops": counter.flops,
            "fused": {"silu": kinds.count("silu"), "add_relu": kinds.count("add_relu")}}


def _inductor_here(cfg: dict, x: torch.Tensor) -> dict:
    """Eager and inductor timed in this process, one thread, on the rank's model and input."""
    import torch._dynamo

    torch.set_num_threads(1)
    model = _model(cfg["width"], cfg["depth"])
    rows: dict[str, dict[str, Any]] = {"eager (bench process)": {"compile_s": 0.0,
                                                                 "call_s": _time(model, x,
                                                                                 cfg["repeats"])}}
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="inductor", fullgraph=True)
        start = time.perf_counter()
        with torch.no_grad():
            compiled(x)
        compile_s = time.perf_counter() - start
        rows["inductor"] = {"compile_s": compile_s, "call_s": _time(compiled, x, cfg["repeats"])}
    except Exception as exc:  # noqa: BLE001  (no C compiler, an unsupported platform: report it)
        rows["inductor"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
    torch._dynamo.reset()
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench framework",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--quick", action="store_true",
                        help="a smaller model, 20 repeats, no inductor")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)

    from harness import launch
    from harness.errors import LaunchError

    cfg = {"width": 64, "depth": 8, "batch": 4, "seq": 32, "repeats": max(1, args.repeats),
           "inductor": not (args.quick or args.no_inductor)}
    if args.quick:
        cfg.update(depth=4, repeats=20)
    torch.manual_seed(1)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["width"])
    try:
        result = launch(bench_rank, world_size=1, args=(cfg, x), impl=args.impl,
                        timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    total_flops = sum(result["flops"].values())
    rows = result["rows"]
    here = _inductor_here(cfg, x) if cfg["inductor"] else {}
    print(f"framework bench: impl={args.impl.text}, MLP of {cfg['depth']} blocks, width "
          f"{cfg['width']}, input [{cfg['batch']}, {cfg['seq']}, {cfg['width']}], "
          f"{total_flops:,} FLOPs per call ({result['flops']})")
    header = f"{'variant':<24} {'compile s':>10} {'call us':>10} {'/ eager':>9} {'GFLOP/s':>9}"
    print(header)
    print("-" * len(header))
    for group in (rows, here):
        if group:
            _print_rows(group, total_flops)
    print(f"your pass fused {result['fused']['silu']} silu and {result['fused']['add_relu']} "
          f"add_relu nodes (expected {cfg['depth']} each). Ratios are to the eager row above "
          f"them, medians of {cfg['repeats']} calls measured in this run; below 1x is faster.")
    return 0


def _print_rows(rows: dict[str, dict], total_flops: int) -> None:
    eager_s = next(iter(rows.values()))["call_s"]
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:<24} not run: {row['error']}")
            continue
        call_s = row["call_s"]
        print(f"{name:<24} {row['compile_s']:>10.2f} {call_s * 1e6:>10.1f} "
              f"{call_s / eager_s:>8.2f}x {total_flops / call_s / 1e9:>9.2f}")
