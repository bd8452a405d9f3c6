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
    ACT_BYTES,
    ACT_FACTOR,
    ACT_FACTOR_RECOMPUTE,
    GRAD_BYTES,
    OPTIMIZER_BYTES,
    TIE_RTOL,
    TP_ALLREDUCES,
    TP_ALLREDUCES_RECOMPUTE,
    TRAIN_FLOPS,
    TRAIN_FLOPS_RECOMPUTE,
    WEIGHT_BYTES,
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
    if model.hidden % model.heads or model.heads % model.kv_heads:
        raise ValueError(f"hidden {model.hidden} / heads {model.heads} / kv_heads "
                         f"{model.kv_heads} do not divide")
    h, f = model.hidden, model.ffn
    h_kv = model.kv_heads * (h // model.heads)
    per_layer = 2 * h * h + 2 * h * h_kv + 3 * h * f + 2 * h
    return model.layers * per_layer + 2 * model.vocab * h + h


def _check_layout(model: Model, layout: Layout, global_batch: int) -> int:
    """The number of micro-batches per step, after checking that the layout divides."""
    if min(layout.tp, layout.pp, layout.dp, layout.micro_batch, global_batch) < 1:
        raise ValueError(f"{layout} / global batch {global_batch}: sizes must be >= 1")
    if layout.zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage {layout.zero}: must be 0, 1, 2 or 3")
    if model.layers % layout.pp:
        raise ValueError(f"{model.layers} layers do not split over pp={layout.pp} stages")
    if global_batch % (layout.dp * layout.micro_batch):
        raise ValueError(f"global batch {global_batch} does not split into dp={layout.dp} "
                         f"× micro-batches of {layout.micro_batch}")
    return global_batch // (layout.dp * layout.micro_batch)


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
    micro_batches = _check_layout(model, layout, global_batch)
    local = param_count(model) / (layout.tp * layout.pp)
    d = layout.dp
    # ZeRO shards, in order of stage: optimizer state (1), gradients (2), the weights (3).
    weights = WEIGHT_BYTES * local / (d if layout.zero >= 3 else 1)
    grads = GRAD_BYTES * local / (d if layout.zero >= 2 else 1)
    optimizer = OPTIMIZER_BYTES * local / (d if layout.zero >= 1 else 1)
    # Korthikanti et al.: 34·s·b·h bytes per layer (sequence parallel, fused attention),
    # only the layer's input (2·s·b·h) when the layer is recomputed; TP divides both.
    factor = ACT_FACTOR_RECOMPUTE if layout.recompute else ACT_FACTOR
    per_layer = model.seq * layout.micro_batch * model.hidden * factor / layout.tp
    in_flight = min(layout.pp, micro_batches)
    activations = (model.layers / layout.pp) * in_flight * per_layer
    return {"weights": weights, "grads": grads, "optimizer": optimizer,
            "activations": activations, "total": weights + grads + optimizer + activations}


def collective_time(op: str, nbytes: float, group_size: int, alpha: float, bw: float) -> float:
    """α-β time in seconds of one ring collective (README §6.3).

    `nbytes` is the size of the whole buffer: the all-reduce's tensor, the all-gather's
    output, the reduce-scatter's input, the message of a send. With k = group_size:
    - "all_reduce": 2·(k−1)·alpha + 2·(k−1)/k · nbytes/bw;
    - "all_gather" and "reduce_scatter": (k−1)·alpha + (k−1)/k · nbytes/bw;
    - "send" (point-to-point, group_size ignored): alpha + nbytes/bw.
    A collective over k = 1 costs 0.

    Raises:
        ValueError: an unknown op, group_size < 1, nbytes < 0 or bw <= 0.
    """
    if op not in COLLECTIVES:
        raise ValueError(f"unknown op {op!r}: one of {COLLECTIVES}")
    if group_size < 1 or nbytes < 0 or bw <= 0:
        raise ValueError(f"group_size {group_size}, nbytes {nbytes}, bw {bw}: out of range")
    if op == "send":
        return alpha + nbytes / bw
    k = group_size
    if k == 1:
        return 0.0
    steps = 2 * (k - 1) if op == "all_reduce" else k - 1
    return steps * alpha + steps / k * nbytes / bw


def _link(cluster: Cluster, span: int) -> tuple[float, float]:
    """(alpha, bw) of an axis whose groups stay inside `span` consecutive GPUs."""
    if span <= cluster.gpus_per_node:
        return cluster.intra_alpha, cluster.intra_bw
    return cluster.inter_alpha, cluster.inter_bw


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
    if layout.tp * layout.pp * layout.dp != cluster.n_gpus:
        raise ValueError(f"tp·pp·dp = {layout.tp * layout.pp * layout.dp} != "
                         f"n_gpus {cluster.n_gpus}")
    m = _check_layout(model, layout, global_batch)
    t, p, d = layout.tp, layout.pp, layout.dp
    act = ACT_BYTES * model.seq * layout.micro_batch * model.hidden
    grad = GRAD_BYTES * param_count(model) / (t * p)
    # TP all-reduces a micro-batch's activation a few times per layer: keep it on NVLink.
    reduces = TP_ALLREDUCES_RECOMPUTE if layout.recompute else TP_ALLREDUCES
    tp = m * (model.layers / p) * reduces * collective_time("all_reduce", act, t,
                                                            *_link(cluster, t))
    # PP sends one activation per micro-batch forward and its gradient back.
    pp = 2 * m * collective_time("send", act, 2, *_link(cluster, t * p)) if p > 1 else 0.0
    # DP reduces gradients once per step, unless ZeRO-2/3 force it per micro-batch.
    link = _link(cluster, t * p * d)
    rs = collective_time("reduce_scatter", grad, d, *link)
    ag = collective_time("all_gather", grad, d, *link)
    if layout.zero <= 1:
        dp = collective_time("all_reduce", grad, d, *link)
    elif layout.zero == 2:
        dp = m * rs + ag
    else:
        dp = m * (rs + 2 * ag)
    return {"tp": tp, "pp": pp, "dp": dp}


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """Fraction of a pipelined step's time each stage idles: (p − 1)/(m + p − 1), with
    p = pp stages and m = micro_batches (GPipe and 1F1B alike; 0 when p = 1).

    Raises:
        ValueError: pp < 1 or micro_batches < 1.
    """
    if pp < 1 or micro_batches < 1:
        raise ValueError(f"pp {pp}, micro_batches {micro_batches}: must be >= 1")
    return (pp - 1) / (micro_batches + pp - 1)


def step_time(model: Model, cluster: Cluster, layout: Layout, global_batch: int) -> float:
    """Seconds of one training step (README §6.4).

    compute = k · P · global_batch · s / (n_gpus · peak_flops) with k = 6, or 8 under
    recompute; step = compute / (1 − bubble_fraction(p, m)) + the three terms of
    `comm_time` (nothing overlaps).

    Raises:
        ValueError: what `comm_time` raises.
    """
    comm = comm_time(model, cluster, layout, global_batch)
    m = global_batch // (layout.dp * layout.micro_batch)
    k = TRAIN_FLOPS_RECOMPUTE if layout.recompute else TRAIN_FLOPS
    compute = k * param_count(model) * global_batch * model.seq / (
        cluster.n_gpus * cluster.peak_flops)
    return compute / (1 - bubble_fraction(layout.pp, m)) + comm["tp"] + comm["pp"] + comm["dp"]


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


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
    if global_batch < 1 or micro_batch < 1:
        raise ValueError(f"global batch {global_batch}, micro batch {micro_batch}: >= 1")
    param_count(model)
    fits: list[tuple[float, float, Layout]] = []
    for tp in _divisors(cluster.gpus_per_node):
        if model.heads % tp or cluster.n_gpus % tp:
            continue
        for pp in _divisors(model.layers):
            if cluster.n_gpus % (tp * pp):
                continue
            dp = cluster.n_gpus // (tp * pp)
            if global_batch % (dp * micro_batch):
                continue
            for zero in range(4):
                for recompute in (False, True):
                    layout = Layout(tp, pp, dp, zero, recompute, micro_batch)
                    memory = memory_per_gpu(model, layout, global_batch)["total"]
                    # Fitting is a hard constraint, checked before speed.
                    if memory <= cluster.gpu_memory:
                        fits.append((step_time(model, cluster, layout, global_batch), memory,
                                     layout))
    if not fits:
        return None
    fastest = min(time for time, _, _ in fits)
    tied = [(memory, (lay.tp, lay.pp, lay.zero, lay.recompute), lay)
            for time, memory, lay in fits if time <= fastest * (1 + TIE_RTOL)]
    return min(tied, key=lambda entry: (entry[0], entry[1]))[2]


def kv_cache_bytes(model: Model, batch: int, context: int) -> float:
    """Bytes of the bf16 K/V cache of `batch` sequences of `context` tokens, whole model:
    2 (K and V) · L · h_kv · context · batch · 2 bytes, h_kv = kv_heads·hidden/heads."""
    h_kv = model.kv_heads * (model.hidden // model.heads)
    return 2 * model.layers * h_kv * context * batch * ACT_BYTES


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
    if min(tp, batch, context) < 1:
        raise ValueError(f"tp {tp}, batch {batch}, context {context}: must be >= 1")
    params = param_count(model)
    # Decode reads every weight once per token: the TP split is what makes it faster.
    memory = (WEIGHT_BYTES * params + kv_cache_bytes(model, batch, context)) / (
        tp * cluster.hbm_bw)
    flops = 2 * params * batch / (tp * cluster.peak_flops)
    comm = 2 * model.layers * collective_time(
        "all_reduce", ACT_BYTES * batch * model.hidden, tp, *_link(cluster, tp))
    return max(memory, flops) + comm


def decode_throughput(model: Model, cluster: Cluster, tp: int, batch: int, context: int
                      ) -> float:
    """Tokens per second per GPU: batch / (decode_latency(...) · tp). Raises as it does."""
    return batch / (decode_latency(model, cluster, tp, batch, context) * tp)


def min_tp_for_latency(model: Model, cluster: Cluster, target: float, batch: int, context: int
                       ) -> int | None:
    """The smallest TP degree that fits and decodes within `target` seconds, or None.

    Candidates, ascending: every tp dividing both gpus_per_node and heads. A tp fits when
    (2·P + kv_cache_bytes(model, batch, context)) / tp <= gpu_memory; it qualifies when it
    fits and decode_latency(...) <= target.

    Raises:
        ValueError: target <= 0, or what `decode_latency` raises.
    """
    if target <= 0:
        raise ValueError(f"target {target}: must be > 0")
    state = WEIGHT_BYTES * param_count(model) + kv_cache_bytes(model, batch, context)
    for tp in _divisors(cluster.gpus_per_node):
        if model.heads % tp:
            continue
        if state / tp <= cluster.gpu_memory and \
                decode_latency(model, cluster, tp, batch, context) <= target:
            return tp
    return None
