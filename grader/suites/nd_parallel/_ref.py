"""References of the nd_parallel suite, computed in the parent: the mesh by enumeration, the
dense model's training in float64 with plain torch, the planner's formulas (README §6–§7) in
plain Python floats. Never imports the code under test (nor the provided `specs`: models,
clusters and layouts are plain dicts here).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F

F64 = torch.float64

# ---- mesh -------------------------------------------------------------------------------------


def mesh_table(shape: dict[str, int]) -> list[tuple[int, ...]]:
    """Coordinates of every rank, in rank order: itertools.product is row-major."""
    return list(itertools.product(*(range(n) for n in shape.values())))


def coords_ref(rank: int, shape: dict[str, int]) -> dict[str, int]:
    return dict(zip(shape, mesh_table(shape)[rank]))


def groups_ref(shape: dict[str, int], axis: str) -> list[list[int]]:
    """Ranks that agree on every coordinate but `axis`, each ascending, by first rank."""
    i = list(shape).index(axis)
    by_rest: dict[tuple[int, ...], list[int]] = {}
    for rank, coords in enumerate(mesh_table(shape)):
        by_rest.setdefault(coords[:i] + coords[i + 1:], []).append(rank)
    return sorted(by_rest.values(), key=lambda g: g[0])


def group_of(shape: dict[str, int], axis: str, rank: int) -> list[int]:
    return next(g for g in groups_ref(shape, axis) if rank in g)


def column_major_groups(shape: dict[str, int], axis: str) -> list[list[int]]:
    """The groups a column-major layout (first axis fastest) would give: for diagnosis."""
    names = list(shape)[::-1]
    flipped = {n: shape[n] for n in names}
    table = mesh_table(flipped)
    i = names.index(axis)
    by_rest: dict[tuple[int, ...], list[int]] = {}
    for rank, coords in enumerate(table):
        by_rest.setdefault(coords[:i] + coords[i + 1:], []).append(rank)
    return sorted(by_rest.values(), key=lambda g: g[0])


# ---- the dense model --------------------------------------------------------------------------


def dense_params(seed_gen: torch.Generator, blocks: int, hidden: int, ffn: int
                 ) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for i in range(blocks):
        out[f"{i}.w1"] = torch.randn(ffn, hidden, generator=seed_gen, dtype=F64) / math.sqrt(hidden)
        out[f"{i}.b1"] = 0.1 * torch.randn(ffn, generator=seed_gen, dtype=F64)
        out[f"{i}.w2"] = torch.randn(hidden, ffn, generator=seed_gen, dtype=F64) / math.sqrt(ffn)
        out[f"{i}.b2"] = 0.1 * torch.randn(hidden, generator=seed_gen, dtype=F64)
    return out


def dense_train(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, lr: float,
                momentum: float) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(final parameters, final momentum buffers) of dense SGD-momentum training, float64."""
    p = {k: v.to(F64).clone() for k, v in params.items()}
    bufs: dict[str, torch.Tensor] = {}
    blocks = sorted({int(k.split(".")[0]) for k in p})
    for step in range(x.shape[0]):
        leaves = {k: v.clone().requires_grad_() for k, v in p.items()}
        h = x[step].to(F64)
        for i in blocks:
            up = h @ leaves[f"{i}.w1"].T + leaves[f"{i}.b1"]
            h = h + F.gelu(up) @ leaves[f"{i}.w2"].T + leaves[f"{i}.b2"]
        loss = ((h - y[step].to(F64)) ** 2).mean()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        for name, grad in zip(leaves, grads):
            bufs[name] = grad.clone() if name not in bufs else bufs[name] * momentum + grad
            p[name] = p[name] - lr * bufs[name]
    return p, bufs


def shard_ref(params: dict[str, torch.Tensor], j: int, t: int) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in params.items():
        kind = name.split(".")[1]
        if kind == "b2":
            out[name] = tensor.clone()
        elif kind in ("w1", "b1"):
            out[name] = tensor.chunk(t, dim=0)[j].clone()
        else:
            out[name] = tensor.chunk(t, dim=1)[j].clone()
    return out


def flat_ref(shards: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([shards[k].reshape(-1) for k in sorted(shards)])


# ---- the planner ------------------------------------------------------------------------------

W_BYTES, G_BYTES, OPT_BYTES, A_BYTES = 2, 2, 12, 2


def params_of(m: dict[str, int]) -> int:
    h, a, g, f = m["hidden"], m["heads"], m["kv_heads"], m["ffn"]
    kv = g * h // a
    return m["layers"] * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + 2 * m["vocab"] * h + h


def micro_batches(lay: dict[str, Any], gb: int) -> int:
    return gb // (lay["dp"] * lay["micro_batch"])


def memory_ref(m: dict[str, int], lay: dict[str, Any], gb: int, *, optimizer: bool = True,
               discount: bool = True) -> dict[str, float]:
    """README §6.2; `optimizer=False`/`discount=False` give known mistakes, for diagnosis."""
    t, p, d, z = lay["tp"], lay["pp"], lay["dp"], lay["zero"]
    local = params_of(m) / (t * p)
    weights = W_BYTES * local / (d if z >= 3 else 1)
    grads = G_BYTES * local / (d if z >= 2 else 1)
    opt = OPT_BYTES * local / (d if z >= 1 else 1) if optimizer else 0.0
    factor = 2 if lay["recompute"] and discount else 34
    acts = (m["layers"] / p) * min(p, micro_batches(lay, gb)) * (
        m["seq"] * lay["micro_batch"] * m["hidden"] * factor / t)
    return {"weights": weights, "grads": grads, "optimizer": opt, "activations": acts,
            "total": weights + grads + opt + acts}


def coll_ref(op: str, n: float, k: int, alpha: float, bw: float) -> float:
    if op == "send":
        return alpha + n / bw
    if k == 1:
        return 0.0
    factor = 2 if op == "all_reduce" else 1
    return factor * (k - 1) * alpha + factor * (k - 1) / k * n / bw


def link(c: dict[str, float], span: int) -> tuple[float, float]:
    if span <= c["gpus_per_node"]:
        return c["intra_alpha"], c["intra_bw"]
    return c["inter_alpha"], c["inter_bw"]


def comm_ref(m: dict[str, int], c: dict[str, float], lay: dict[str, Any], gb: int
             ) -> dict[str, float]:
    t, p, d, z = lay["tp"], lay["pp"], lay["dp"], lay["zero"]
    mb = micro_batches(lay, gb)
    act = A_BYTES * m["seq"] * lay["micro_batch"] * m["hidden"]
    grad = G_BYTES * params_of(m) / (t * p)
    n_ar = 6 if lay["recompute"] else 4
    tp = mb * (m["layers"] / p) * n_ar * coll_ref("all_reduce", act, t, *link(c, t))
    pp = 2 * mb * coll_ref("send", act, 2, *link(c, t * p)) if p > 1 else 0.0
    lk = link(c, t * p * d)
    rs, ag = coll_ref("reduce_scatter", grad, d, *lk), coll_ref("all_gather", grad, d, *lk)
    if z <= 1:
        dp = coll_ref("all_reduce", grad, d, *lk)
    elif z == 2:
        dp = mb * rs + ag
    else:
        dp = mb * (rs + 2 * ag)
    return {"tp": tp, "pp": pp, "dp": dp}


def bubble_ref(p: int, mb: int) -> float:
    return (p - 1) / (mb + p - 1)


def step_ref(m: dict[str, int], c: dict[str, float], lay: dict[str, Any], gb: int) -> float:
    comm = comm_ref(m, c, lay, gb)
    k = 8 if lay["recompute"] else 6
    compute = k * params_of(m) * gb * m["seq"] / (c["n_gpus"] * c["peak_flops"])
    return compute / (1 - bubble_ref(lay["pp"], micro_batches(lay, gb))) + sum(comm.values())


def candidates(m: dict[str, int], c: dict[str, float], gb: int, mbs: int
               ) -> list[tuple[float, float, dict[str, Any]]]:
    """Every candidate of README §6.5 as (step time, memory total, layout), fitting or not."""
    out = []
    n, node = int(c["n_gpus"]), int(c["gpus_per_node"])
    for t in (k for k in range(1, node + 1) if node % k == 0 and m["heads"] % k == 0):
        for p in (k for k in range(1, m["layers"] + 1) if m["layers"] % k == 0):
            if n % (t * p) or gb % (n // (t * p) * mbs):
                continue
            for z in range(4):
                for rc in (False, True):
                    lay = {"tp": t, "pp": p, "dp": n // (t * p), "zero": z, "recompute": rc,
                           "micro_batch": mbs}
                    out.append((step_ref(m, c, lay, gb), memory_ref(m, lay, gb)["total"], lay))
    return out


def best_ref(m: dict[str, int], c: dict[str, float], gb: int, mbs: int = 1
             ) -> dict[str, Any] | None:
    fits = [e for e in candidates(m, c, gb, mbs) if e[1] <= c["gpu_memory"]]
    if not fits:
        return None
    fastest = min(e[0] for e in fits)
    tied = [e for e in fits if e[0] <= fastest * (1 + 1e-9)]
    return min(tied, key=lambda e: (e[1], e[2]["tp"], e[2]["pp"], e[2]["zero"],
                                    e[2]["recompute"]))[2]


def fastest_ignoring_memory(m: dict[str, int], c: dict[str, float], gb: int, mbs: int = 1
                            ) -> tuple[float, float, dict[str, Any]]:
    return min(candidates(m, c, gb, mbs), key=lambda e: e[0])


def kv_ref(m: dict[str, int], batch: int, context: int) -> float:
    return 2 * m["layers"] * (m["kv_heads"] * m["hidden"] // m["heads"]) * context * batch * 2


def decode_ref(m: dict[str, int], c: dict[str, float], tp: int, batch: int, context: int, *,
               split_weights: bool = True) -> float:
    """README §7; `split_weights=False` is a known mistake, for diagnosis."""
    params = params_of(m)
    weights = W_BYTES * params / (tp if split_weights else 1)
    memory = (weights + kv_ref(m, batch, context) / tp) / c["hbm_bw"]
    flops = 2 * params * batch / (tp * c["peak_flops"])
    comm = 2 * m["layers"] * coll_ref("all_reduce", A_BYTES * batch * m["hidden"], tp,
                                      *link(c, tp))
    return max(memory, flops) + comm


def min_tp_ref(m: dict[str, int], c: dict[str, float], target: float, batch: int,
               context: int) -> int | None:
    state = W_BYTES * params_of(m) + kv_ref(m, batch, context)
    node = int(c["gpus_per_node"])
    for tp in (k for k in range(1, node + 1) if node % k == 0 and m["heads"] % k == 0):
        if state / tp <= c["gpu_memory"] and decode_ref(m, c, tp, batch, context) <= target:
            return tp
    return None
