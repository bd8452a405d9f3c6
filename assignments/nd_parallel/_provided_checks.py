"""What the nd_parallel tests say when a planner number is off (provided: read it, do not edit).

The public test and the hidden suite compare `memory_per_gpu` and `comm_time` with README §6's
formulas term by term; when a term is more than 1% off, its failure message opens with the
formula of that term from these tables. They restate the README and hold no expected value.
"""

from __future__ import annotations

__all__ = ["COMM_HINTS", "MEMORY_HINTS"]

# memory_per_gpu's keys -> the formula of that term (README §6.2).
MEMORY_HINTS = {
    "weights": "weights = 2·P/(t·p) bytes, divided by dp only under ZeRO-3",
    "grads": "grads = 2·P/(t·p) bytes, divided by dp from ZeRO-2 on",
    "optimizer": "optimizer state = 12·P/(t·p) bytes (fp32 master, m, v), divided by dp from "
                 "ZeRO-1 on, never dropped",
    "activations": "activations = (L/p)·min(p, m)·s·b·h·34/t; with recompute the discount keeps "
                   "2·s·b·h/t per layer (c=2)",
    "total": "total = weights + grads + optimizer + activations",
}
# comm_time's keys -> the formula of that axis's time per step (README §6.3).
COMM_HINTS = {
    "tp": "tp = m·(L/p)·4 all-reduces (6 with recompute) of 2·s·b·h bytes over t, on the "
          "intra-node link when t <= gpus_per_node",
    "pp": "pp = 2·m sends of 2·s·b·h bytes when p > 1, on the link of the span t·p",
    "dp": "dp = all_reduce(2·P/(t·p), d) for ZeRO <= 1; m·reduce_scatter + all_gather for "
          "ZeRO-2; m·(reduce_scatter + 2·all_gather) for ZeRO-3; link of span t·p·d",
}
