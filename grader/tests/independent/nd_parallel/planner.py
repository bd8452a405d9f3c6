"""An independent `planner.py`, written from the stub's docstrings and README §6–§7 only.

Pure functions: memory, communication and time of a training layout, the layout search, and
the shape of decode. Units: bytes, seconds, FLOP/s, bytes/s. No torch, no state.
"""

from __future__ import annotations

import itertools

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


def _kv_width(model: Model) -> int:
    """h_kv = kv_heads·hidden/heads, after checking the divisibilities param_count needs."""
    if model.heads < 1 or model.kv_heads < 1:
        raise ValueError("heads and kv_heads must be >= 1")
    if model.hidden % model.heads:
        raise ValueError(f"hidden {model.hidden} is not divisible by heads {model.heads}")
    if model.heads % model.kv_heads:
        raise ValueError(f"heads {model.heads} is not divisible by kv_heads {model.kv_heads}")
    return (model.hidden // model.heads) * model.kv_heads


def param_count(model: Model) -> int:
    """Parameters of `model`, an int (README §6.1).

    Per layer: attention 2·h² + 2·h·h_kv, gated MLP 3·h·f, two norms 2·h; plus untied input and
    output embeddings 2·V·h and the final norm h. No biases.

    Raises:
        ValueError: hidden not divisible by heads, or heads not divisible by kv_heads.
    """
    h = model.hidden
    hkv = _kv_width(model)
    attention = 2 * h * (h + hkv)
    mlp = 3 * h * model.ffn
    norms = 2 * h
    return model.layers * (attention + mlp + norms) + h * (2 * model.vocab + 1)


def _micro_batches(model: Model, layout: Layout, global_batch: int) -> int:
    """m = global_batch/(dp·micro_batch), after validating the layout against the model."""
    for label, value in (("tp", layout.tp), ("pp", layout.pp), ("dp", layout.dp),
                         ("micro_batch", layout.micro_batch), ("global_batch", global_batch)):
        if value < 1:
            raise ValueError(f"{label} must be >= 1, got {value}")
    if layout.zero not in (0, 1, 2, 3):
        raise ValueError(f"zero stage {layout.zero} is not one of 0, 1, 2, 3")
    if model.layers % layout.pp:
        raise ValueError(f"layers {model.layers} not divisible by pp {layout.pp}")
    per_step = layout.dp * layout.micro_batch
    if global_batch % per_step:
        raise ValueError(f"global_batch {global_batch} not divisible by dp·micro_batch "
                         f"{per_step}")
    return global_batch // per_step


def memory_per_gpu(model: Model, layout: Layout, global_batch: int) -> dict[str, float]:
    """Bytes of training state and activations on the busiest GPU (README §6.2).

    weights 2·P/(t·p) (/d at ZeRO ≥ 3), grads 2·P/(t·p) (/d at ≥ 2), optimizer 12·P/(t·p)
    (/d at ≥ 1), activations (L/p)·min(p, m)·s·b·h·c/t with c = 34 (2 with recompute), and
    their total. Floats, bytes.

    Raises:
        ValueError: a degree, micro_batch or global_batch < 1; zero outside 0..3; layers not
        divisible by pp; global_batch not divisible by dp·micro_batch; what param_count raises.
    """
    m = _micro_batches(model, layout, global_batch)
    per_gpu = param_count(model) / (layout.tp * layout.pp)
    d = layout.dp
    z = layout.zero
    weights = WEIGHT_BYTES * per_gpu / (d if z >= 3 else 1)
    grads = GRAD_BYTES * per_gpu / (d if z >= 2 else 1)
    optimizer = OPTIMIZER_BYTES * per_gpu / (d if z >= 1 else 1)
    c = ACT_FACTOR_RECOMPUTE if layout.recompute else ACT_FACTOR
    layers_here = model.layers // layout.pp
    in_flight = min(layout.pp, m)
    activations = (layers_here * in_flight * model.seq * layout.micro_batch * model.hidden
                   * c / layout.tp)
    parts = {"weights": float(weights), "grads": float(grads),
             "optimizer": float(optimizer), "activations": float(activations)}
    parts["total"] = sum(parts.values())
    return parts


def collective_time(op: str, nbytes: float, group_size: int, alpha: float, bw: float) -> float:
    """α-β seconds of one ring collective over `group_size` ranks (README §6.3); `nbytes` is
    the whole buffer. all_reduce 2(k−1)α + 2(k−1)/k·n/bw; all_gather, reduce_scatter
    (k−1)α + (k−1)/k·n/bw; send α + n/bw (k ignored); k = 1 costs 0.

    Raises:
        ValueError: an unknown op, group_size < 1, nbytes < 0 or bw <= 0.
    """
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r}; one of {COLLECTIVES}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if not bw > 0:
        raise ValueError(f"bandwidth must be > 0, got {bw}")
    if op == "send":
        return float(alpha + nbytes / bw)
    if group_size == 1:
        return 0.0
    hops = group_size - 1
    passes = 2 if op == "all_reduce" else 1
    return float(passes * (hops * alpha + hops / group_size * nbytes / bw))


def _link(cluster: Cluster, span: int) -> tuple[float, float]:
    """(alpha, bw) of an axis whose span (its size times the sizes inside it) is `span`."""
    if span <= cluster.gpus_per_node:
        return cluster.intra_alpha, cluster.intra_bw
    return cluster.inter_alpha, cluster.inter_bw


def comm_time(model: Model, cluster: Cluster, layout: Layout, global_batch: int
              ) -> dict[str, float]:
    """Seconds of communication per step on each axis (README §6.3), {"tp", "pp", "dp"}.

    Raises:
        ValueError: tp·pp·dp != n_gpus, or what memory_per_gpu raises.
    """
    m = _micro_batches(model, layout, global_batch)
    t, p, d = layout.tp, layout.pp, layout.dp
    if t * p * d != cluster.n_gpus:
        raise ValueError(f"tp·pp·dp = {t * p * d} is not n_gpus = {cluster.n_gpus}")
    act = ACT_BYTES * model.seq * layout.micro_batch * model.hidden
    grad = GRAD_BYTES * param_count(model) / (t * p)

    tp_link = _link(cluster, t)
    n_ar = TP_ALLREDUCES_RECOMPUTE if layout.recompute else TP_ALLREDUCES
    tp = m * (model.layers // p) * n_ar * collective_time("all_reduce", act, t, *tp_link)

    pp = 0.0
    if p > 1:
        pp = 2 * m * collective_time("send", act, p, *_link(cluster, t * p))

    dp_link = _link(cluster, t * p * d)
    if layout.zero <= 1:
        dp = collective_time("all_reduce", grad, d, *dp_link)
    else:
        rs = collective_time("reduce_scatter", grad, d, *dp_link)
        ag = collective_time("all_gather", grad, d, *dp_link)
        dp = m * rs + ag if layout.zero == 2 else m * (rs + 2 * ag)
    return {"tp": float(tp), "pp": float(pp), "dp": float(dp)}


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """(p − 1)/(m + p − 1): the idle fraction of a pipelined step; 0 when p = 1.

    Raises:
        ValueError: pp < 1 or micro_batches < 1.
    """
    if pp < 1 or micro_batches < 1:
        raise ValueError(f"pp and micro_batches must be >= 1, got {pp}, {micro_batches}")
    return (pp - 1) / (micro_batches + pp - 1)


def step_time(model: Model, cluster: Cluster, layout: Layout, global_batch: int) -> float:
    """Seconds per step: compute/(1 − bubble) + tp + pp + dp (README §6.4).

    Raises:
        ValueError: what comm_time raises.
    """
    comm = comm_time(model, cluster, layout, global_batch)
    m = _micro_batches(model, layout, global_batch)
    k = TRAIN_FLOPS_RECOMPUTE if layout.recompute else TRAIN_FLOPS
    compute = (k * param_count(model) * global_batch * model.seq
               / (cluster.n_gpus * cluster.peak_flops))
    return float(compute / (1 - bubble_fraction(layout.pp, m)) + sum(comm.values()))


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def best_layout(model: Model, cluster: Cluster, global_batch: int, micro_batch: int = 1
                ) -> Layout | None:
    """The fastest layout that fits in memory, or None (README §6.5).

    Ties (step times within a relative TIE_RTOL of the fastest) go to the least memory, then
    the smallest (tp, pp, zero, recompute).

    Raises:
        ValueError: global_batch or micro_batch < 1, or what param_count raises.
    """
    if global_batch < 1 or micro_batch < 1:
        raise ValueError(f"global_batch and micro_batch must be >= 1, got {global_batch}, "
                         f"{micro_batch}")
    param_count(model)
    tps = [t for t in _divisors(cluster.gpus_per_node) if model.heads % t == 0]
    pps = _divisors(model.layers)
    fitting: list[tuple[float, float, tuple[int, int, int, bool], Layout]] = []
    for t, p in itertools.product(tps, pps):
        if cluster.n_gpus % (t * p):
            continue
        d = cluster.n_gpus // (t * p)
        if global_batch % (d * micro_batch):
            continue
        for zero, recompute in itertools.product(range(4), (False, True)):
            layout = Layout(tp=t, pp=p, dp=d, zero=zero, recompute=recompute,
                            micro_batch=micro_batch)
            total = memory_per_gpu(model, layout, global_batch)["total"]
            if total > cluster.gpu_memory:
                continue
            seconds = step_time(model, cluster, layout, global_batch)
            fitting.append((seconds, total, (t, p, zero, recompute), layout))
    if not fitting:
        return None
    fastest = min(entry[0] for entry in fitting)
    tied = [e for e in fitting if e[0] <= fastest * (1 + TIE_RTOL)]
    return min(tied, key=lambda e: (e[1], e[2]))[3]


def kv_cache_bytes(model: Model, batch: int, context: int) -> float:
    """Bytes of the bf16 K/V cache: 2·L·h_kv·context·batch·2."""
    return float(2 * model.layers * _kv_width(model) * context * batch * ACT_BYTES)


def _check_decode(tp: int, batch: int, context: int) -> None:
    if tp < 1 or batch < 1 or context < 1:
        raise ValueError(f"tp, batch and context must be >= 1, got {tp}, {batch}, {context}")


def decode_latency(model: Model, cluster: Cluster, tp: int, batch: int, context: int) -> float:
    """Seconds per decode step at TP degree `tp` (README §7):
    max((2·P + kv)/(tp·hbm_bw), 2·P·batch/(tp·peak_flops)) + 2·L·all_reduce(2·batch·h, tp)
    on the intra-node link (inter-node when tp > gpus_per_node).

    Raises:
        ValueError: tp, batch or context < 1, or what param_count raises.
    """
    _check_decode(tp, batch, context)
    weights = WEIGHT_BYTES * param_count(model)
    read = (weights + kv_cache_bytes(model, batch, context)) / (tp * cluster.hbm_bw)
    math_time = weights * batch / (tp * cluster.peak_flops)
    alpha, bw = _link(cluster, tp)
    comm = 2 * model.layers * collective_time("all_reduce", ACT_BYTES * batch * model.hidden,
                                              tp, alpha, bw)
    return float(max(read, math_time) + comm)


def decode_throughput(model: Model, cluster: Cluster, tp: int, batch: int, context: int
                      ) -> float:
    """Tokens per second per GPU: batch / (decode_latency(...)·tp). Raises as it does."""
    return float(batch / (decode_latency(model, cluster, tp, batch, context) * tp))


def min_tp_for_latency(model: Model, cluster: Cluster, target: float, batch: int, context: int
                       ) -> int | None:
    """The smallest tp dividing gpus_per_node and heads whose (2·P + kv)/tp fits gpu_memory
    and whose decode latency is at most `target`; None if none.

    Raises:
        ValueError: target <= 0, or what decode_latency raises.
    """
    if not target > 0:
        raise ValueError(f"target must be > 0 seconds, got {target}")
    _check_decode(1, batch, context)
    held = WEIGHT_BYTES * param_count(model) + kv_cache_bytes(model, batch, context)
    for tp in _divisors(cluster.gpus_per_node):
        if model.heads % tp:
            continue
        if held / tp > cluster.gpu_memory:
            continue
        if decode_latency(model, cluster, tp, batch, context) <= target:
            return tp
    return None
