"""The planner: memory, communication and time of a training layout, the best layout, and the
shape of decode (README §6–§8). Pure functions of their arguments: no torch, no communication,
no randomness, no state.

Units everywhere: bytes, seconds, FLOP/s, bytes/s (SI). Inputs are the dataclasses of the
provided `assignments.nd_parallel.specs` (`Model`, `Cluster`, `Layout`) and its constants.
Results are Python floats (ints where the docstring says so); the grader compares each number
with its own float64 evaluation of the same formula within 1% (relative), so the order of
operations is free.
"""

from __future__ import annotations

from assignments.nd_parallel.specs import (
    Cluster,
    Layout,
    Model,
)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "send")


def param_count(model: Model) -> int:
    """Parameters of `model`, an int (README §6.1).

    With h = hidden, a = heads, g = kv_heads, f = ffn, L = layers, V = vocab and the K/V width
    h_kv = g·h/a, one layer holds 2·h² (Q and O) + 2·h·h_kv (K and V) + 3·h·f (gated MLP)
    + 2·h (two norms); the model holds L layers, 2·V·h (untied input and output embeddings)
    and h (the final norm). No biases.

    Raises:
        ValueError: hidden not divisible by heads, or heads not divisible by kv_heads.
    """
    raise NotImplementedError("param_count: see README §6.1")


def memory_per_gpu(model: Model, layout: Layout, global_batch: int) -> dict[str, float]:
    """Bytes of training state and activations on the busiest GPU (README §6.2).

    With P = param_count(model), t, p, d the layout's degrees, z its ZeRO stage, b its
    micro-batch, s = model.seq, h = model.hidden, L = model.layers and m = global_batch/(d·b)
    micro-batches per step:
    - each GPU holds P/(t·p) parameters (every parameter spread evenly, embeddings included);
    - "weights" = 2·P/(t·p), divided by d when z ≥ 3;
    - "grads" = 2·P/(t·p), divided by d when z ≥ 2;
    - "optimizer" = 12·P/(t·p) (fp32 master, Adam m and v), divided by d when z ≥ 1;
    - "activations" = (L/p) · min(p, m) · s·b·h·c / t with c = 34, or c = 2 under
      `layout.recompute` (1F1B: the first stage keeps min(p, m) micro-batches in flight);
    - "total" = the sum of the four.

    Returns:
        {"weights", "grads", "optimizer", "activations", "total"}: floats, bytes.

    Raises:
        ValueError: any degree, micro_batch or global_batch < 1; zero not in 0..3; layers not
        divisible by pp; global_batch not divisible by dp·micro_batch; or what
        `param_count` raises.
    """
    raise NotImplementedError("memory_per_gpu: see README §6.2")


def collective_time(op: str, nbytes: float, group_size: int, alpha: float, bw: float) -> float:
    """α-β time in seconds of one ring collective (README §6.3).

    `nbytes` is the size of the whole buffer: the all-reduce's tensor, the all-gather's
    output, the reduce-scatter's input, the message of a send. With k = group_size:
    - "all_reduce": 2·(k−1)·alpha + 2·(k−1)/k · nbytes/bw;
    - "all_gather" and "reduce_scatter": (k−1)·alpha + (k−1)/k · nbytes/bw;
    - "send" (point-to-point, group_size ignored): alpha + nbytes/bw.
    A collective (not a send, whose cost does not depend on k) over k = 1 costs 0.

    Raises:
        ValueError: an unknown op, group_size < 1, nbytes < 0 or bw <= 0.
    """
    raise NotImplementedError("collective_time: see README §6.3")


def comm_time(model: Model, cluster: Cluster, layout: Layout, global_batch: int
              ) -> dict[str, float]:
    """Seconds of communication per training step on each axis, no overlap (README §6.3).

    Links: the mesh is row-major (dp, pp, tp). An axis uses the intra-node figures
    (intra_alpha, intra_bw) when its size times the sizes of the axes inside it is at most
    gpus_per_node (tp: t; pp: t·p; dp: t·p·d), else the inter-node ones.
    With a = 2·s·b·h (one micro-batch's bf16 activation, bytes), m = global_batch/(d·b),
    P = param_count(model) and G = 2·P/(t·p) (this GPU's bf16 gradient bytes):
    - "tp": m · (L/p) · n · all_reduce(a, t) with n = 4, or 6 under recompute;
    - "pp": 2·m · send(a) when p > 1 (activation forward, its gradient back), else 0;
    - "dp": z ≤ 1: all_reduce(G, d); z = 2: m · reduce_scatter(G, d) + all_gather(G, d)
      (sharded gradients cannot accumulate over micro-batches); z = 3:
      m · (reduce_scatter(G, d) + 2 · all_gather(G, d)) (weights gathered for forward and
      backward of every micro-batch).
    Each term with `collective_time` on the axis's link.

    Returns:
        {"tp", "pp", "dp"}: floats, seconds.

    Raises:
        ValueError: tp·pp·dp != cluster.n_gpus, or what `memory_per_gpu` raises.
    """
    raise NotImplementedError("comm_time: see README §6.3")


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """Fraction of a pipelined step's time each stage idles: (p − 1)/(m + p − 1), with
    p = pp stages and m = micro_batches (GPipe and 1F1B alike; 0 when p = 1).

    Raises:
        ValueError: pp < 1 or micro_batches < 1.
    """
    raise NotImplementedError("bubble_fraction: see README §6.4")


def step_time(model: Model, cluster: Cluster, layout: Layout, global_batch: int) -> float:
    """Seconds of one training step (README §6.4).

    compute = k · P · global_batch · s / (n_gpus · peak_flops) with k = 6, or 8 under
    recompute; step = compute / (1 − bubble_fraction(p, m)) + the three terms of
    `comm_time` (nothing overlaps).

    Raises:
        ValueError: what `comm_time` raises.
    """
    raise NotImplementedError("step_time: see README §6.4")


def best_layout(model: Model, cluster: Cluster, global_batch: int, micro_batch: int = 1
                ) -> Layout | None:
    """The fastest layout that fits in memory, or None if none fits (README §6.5).

    Candidates: every tp dividing both gpus_per_node and heads, pp dividing layers,
    dp = n_gpus/(tp·pp) a whole number with global_batch divisible by dp·micro_batch,
    zero in 0..3 and recompute False/True, all with the given micro_batch. A candidate fits
    when memory_per_gpu(...)["total"] <= gpu_memory. Among those that fit, the smallest
    step_time wins; candidates within a relative 1e-9 of the smallest time are tied, and a
    tie goes to the smallest memory total, then the smallest (tp, pp, zero, recompute).
    A layout that does not fit is never chosen, however fast.

    Returns:
        A new `Layout` (micro_batch as given), or None.

    Raises:
        ValueError: global_batch or micro_batch < 1, or what `param_count` raises.
    """
    raise NotImplementedError("best_layout: see README §6.5")


def kv_cache_bytes(model: Model, batch: int, context: int) -> float:
    """Bytes of the bf16 K/V cache of `batch` sequences of `context` tokens, whole model:
    2 (K and V) · L · h_kv · context · batch · 2 bytes, h_kv = kv_heads·hidden/heads."""
    raise NotImplementedError("kv_cache_bytes: see README §7")


def decode_latency(model: Model, cluster: Cluster, tp: int, batch: int, context: int) -> float:
    """Seconds per decode step (one token for each of `batch` sequences) at TP degree `tp`
    (README §8).

    memory = (2·P + kv_cache_bytes(model, batch, context)) / (tp · hbm_bw): every GPU reads
    its 1/tp of the bf16 weights and of the cache once per token; flops = 2·P·batch /
    (tp · peak_flops); comm = 2 · L · all_reduce(2·batch·hidden bytes, tp) on the intra-node
    link if tp <= gpus_per_node, else the inter-node one. latency = max(memory, flops) + comm.

    Raises:
        ValueError: tp, batch or context < 1, or what `param_count` raises.
    """
    raise NotImplementedError("decode_latency: see README §7")


def decode_throughput(model: Model, cluster: Cluster, tp: int, batch: int, context: int
                      ) -> float:
    """Tokens per second per GPU: batch / (decode_latency(...) · tp). Raises as it does."""
    raise NotImplementedError("decode_throughput: see README §7")


def min_tp_for_latency(model: Model, cluster: Cluster, target: float, batch: int, context: int
                       ) -> int | None:
    """The smallest TP degree that fits and decodes within `target` seconds, or None.

    Candidates, ascending: every tp dividing both gpus_per_node and heads. A tp fits when
    (2·P + kv_cache_bytes(model, batch, context)) / tp <= gpu_memory; it qualifies when it
    fits and decode_latency(...) <= target.

    Raises:
        ValueError: target <= 0, or what `decode_latency` raises.
    """
    raise NotImplementedError("min_tp_for_latency: see README §7")
