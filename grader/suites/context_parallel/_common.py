"""Shared pieces of the context_parallel hidden suite: cases, parent-side references, the rank
side that runs every case of a launch, the probes, and the launches.

Parent side: every input is drawn here from fixed seeds and every expected value is computed
here in float64 with plain torch (full attention on the gathered sequence, the dense MLP block).
Rank side: `rank_all` runs each case in its own error scope (`harness.cases.run_cases`), so a
stub costs only the tests that read its cases. Ranks get inputs only.

The ring cases run under the sidecar transport: the sends and receives the message tests count
are the wire's (`result.wire`), cut per case by the rank's marks (labels only). The ring's
"probe" cases also run the call under a torch-function mode, bound before the submission is
imported, that looks at every matrix product: which receives are posted and not yet waited
(overlap), and how many other ranks' K/V blocks are alive (memory: every float64 storage the
garbage collector reaches is searched for each block's fingerprint, a value only that block
holds; the buffers of receives still in flight are left out, as they hold no block yet).
Ulysses runs under the sidecar transport too: its bytes are what the sidecars carried to the
other ranks (each all-to-all's per-peer bytes, the rank's own slot left out), in the window of
the case's mark.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from grader.compare import Tolerance, assert_close, attention_bound
from grader.seeds import seeded_generator
from harness.cases import case_values, run_cases

BACKEND = "gloo"
TRANSPORT = "sidecar"
TIMEOUT_S = 90.0
F64 = torch.float64
MATMULS = ("matmul", "__matmul__", "__rmatmul__", "einsum", "bmm", "mm", "baddbmm",
           "scaled_dot_product_attention", "tensordot")


def randn(seed: int, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=F64).to(dtype)


def where(rank: int, world: int) -> str:
    return f"[rank {rank} of {world}]"


# ---- parent: references -----------------------------------------------------------------------

def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   q_offset: int = 0, k_offset: int = 0, scale: float | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain float64 attention over one key set, with its lse (-inf and zeros for empty rows)."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        qp = torch.arange(q.shape[-2]) + q_offset
        kp = torch.arange(k.shape[-2]) + k_offset
        scores = scores.masked_fill(kp[None, :] > qp[:, None], float("-inf"))
    lse = torch.logsumexp(scores, -1)
    seen = torch.isfinite(lse)
    probs = torch.where(seen[..., None], torch.softmax(scores, -1), torch.zeros_like(scores))
    return torch.einsum("bhqk,bhkd->bhqd", probs.nan_to_num(0.0), v), lse


def attention_tol(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype,
                  blocks: int = 1) -> Tolerance:
    """The derived bound of `grader.compare.attention_bound`, from the case's own inputs, with
    one merge per block folded into the key count."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    score_sum = float((q.abs().to(F64) @ k.abs().to(F64).transpose(-1, -2)).max()) * scale
    return attention_bound(dtype, head_dim=q.shape[-1], keys=k.shape[-2] + 4 * blocks,
                           score_sum=score_sum, value_max=float(v.abs().max()))


def shard(t: torch.Tensor, world: int, dim: int = 2) -> list[torch.Tensor]:
    return [c.clone() for c in t.chunk(world, dim=dim)]


def fingerprint_of(t: torch.Tensor) -> float:
    return float(t.reshape(-1)[0])


# ---- parent: ring cases -----------------------------------------------------------------------

def ring_case(world: int, *, batch: int, heads: int, seq: int, dim: int, dim_v: int,
              causal: bool, seed: int, dtype: torch.dtype = F64, probe: bool = False,
              backward: bool = False) -> dict[str, Any]:
    q, k, v = (randn(seed, batch, heads, seq, dim, dtype=dtype),
               randn(seed + 1, batch, heads, seq, dim, dtype=dtype),
               randn(seed + 2, batch, heads, seq, dim_v, dtype=dtype))
    case: dict[str, Any] = {"kind": "ring", "causal": causal, "probe": probe,
                            "backward": backward, "q": shard(q, world), "k": shard(k, world),
                            "v": shard(v, world), "dtype": str(dtype)}
    expected: dict[str, Any] = {"out": shard(full_attention(q, k, v, causal)[0], world),
                                "tol": attention_tol(q, k, v, dtype, world)}
    if probe:
        prints = [(r, fingerprint_of(t)) for r in range(world)
                  for t in (case["k"][r], case["v"][r])]
        values = [p for _, p in prints]
        assert len(set(values)) == len(values), "fingerprints collide: pick another seed"
        for r in range(world):
            assert int(torch.isin(case["q"][r], torch.tensor(values, dtype=dtype)).sum()) == 0
        case["fingerprints"] = prints
    if backward:
        grad = randn(seed + 3, batch, heads, seq, dim_v, dtype=dtype)
        leaves = [t.clone().to(F64).requires_grad_() for t in (q, k, v)]
        out, _ = full_attention(*leaves, causal=causal)
        out.backward(grad.to(F64))
        case["grad"] = shard(grad, world)
        expected.update({f"{n}_grad": shard(t.grad, world) for n, t in zip("qkv", leaves)})
        expected["grad_tol"] = expected["tol"].scaled(4 * seq)
    case["expected"] = expected
    return case


def ulysses_case(world: int, *, batch: int, heads: int, seq: int, dim: int, dim_v: int,
                 causal: bool, seed: int) -> dict[str, Any]:
    case = ring_case(world, batch=batch, heads=heads, seq=seq, dim=dim, dim_v=dim_v,
                     causal=causal, seed=seed)
    case["kind"] = "ulysses"
    shard_bytes = sum(t[0].numel() * t[0].element_size() for t in (case["q"], case["k"],
                                                                   case["v"]))
    out_bytes = case["expected"]["out"][0].numel() * 8
    case["expected"]["wire_bytes"] = (world - 1) * (shard_bytes + out_bytes) // world
    return case


# ---- parent: sequence-parallel cases ----------------------------------------------------------

def sp_ops_case(world: int, seed: int, batch: int = 2, seq_per_rank: int = 3, hidden: int = 5
                ) -> dict[str, Any]:
    seq = seq_per_rank * world
    xs = [randn(seed + r, batch, seq_per_rank, hidden) for r in range(world)]
    gather_grads = [randn(seed + 10 + r, batch, seq, hidden) for r in range(world)]
    partials = [randn(seed + 20 + r, batch, seq, hidden) for r in range(world)]
    rs_grads = [randn(seed + 30 + r, batch, seq_per_rank, hidden) for r in range(world)]
    total_grad = sum(gather_grads)
    full = torch.cat(xs, dim=1)
    summed = sum(partials)
    return {"kind": "sp_ops", "xs": xs, "gather_grads": gather_grads, "partials": partials,
            "rs_grads": rs_grads,
            "expected": {"gather": full,
                         "gather_x_grad": shard(total_grad, world, dim=1),
                         "rs": shard(summed, world, dim=1),
                         "rs_x_grad": torch.cat(rs_grads, dim=1)}}


def dense_block(x, ln_w, ln_b, w1, b1, w2, b2):
    h = F.layer_norm(x, x.shape[-1:], ln_w, ln_b, eps=1e-5)
    return x + F.gelu(h @ w1.t() + b1) @ w2.t() + b2


def sp_mlp_case(world: int, seed: int, batch: int = 2, seq_per_rank: int = 3, hidden: int = 6,
                ffn: int = 8) -> dict[str, Any]:
    seq = seq_per_rank * world
    x = randn(seed, batch, seq, hidden)
    params = {"ln_weight": 1 + 0.1 * randn(seed + 1, hidden), "ln_bias": randn(seed + 2, hidden),
              "w1": randn(seed + 3, ffn, hidden) * 0.4, "b1": randn(seed + 4, ffn),
              "w2": randn(seed + 5, hidden, ffn) * 0.4, "b2": randn(seed + 6, hidden)}
    grad = randn(seed + 7, batch, seq, hidden)
    leaves = {n: t.clone().requires_grad_() for n, t in params.items()}
    xl = x.clone().requires_grad_()
    y = dense_block(xl, *leaves.values())
    y.backward(grad)
    f = ffn // world
    per_rank = [{"ln_weight": params["ln_weight"], "ln_bias": params["ln_bias"],
                 "w1": params["w1"][r * f:(r + 1) * f].clone(),
                 "b1": params["b1"][r * f:(r + 1) * f].clone(),
                 "w2": params["w2"][:, r * f:(r + 1) * f].clone(), "b2": params["b2"]}
                for r in range(world)]
    g = {n: t.grad for n, t in leaves.items()}
    expected = {"y": shard(y.detach(), world, 1), "x_grad": shard(xl.grad, world, 1),
                "w1_grad": [g["w1"][r * f:(r + 1) * f] for r in range(world)],
                "b1_grad": [g["b1"][r * f:(r + 1) * f] for r in range(world)],
                "w2_grad": [g["w2"][:, r * f:(r + 1) * f] for r in range(world)],
                "ln_weight_grad": g["ln_weight"], "ln_bias_grad": g["ln_bias"],
                "b2_grad": g["b2"]}
    return {"kind": "sp_mlp", "x": shard(x, world, 1), "grad": shard(grad, world, 1),
            "params": per_rank, "expected": expected}


# ---- rank side --------------------------------------------------------------------------------

def _probe_mode(ctx, c: dict):
    """A torch-function mode that, at every matrix product, records the receives in flight
    and the other ranks' K/V blocks alive (see the module docstring)."""
    import gc

    import torch.distributed as dist
    from torch.overrides import TorchFunctionMode

    foreign = [(owner, value) for owner, value in c["fingerprints"] if owner != ctx.rank]
    prints = torch.tensor([v for _, v in foreign], dtype=F64)
    events: list[dict] = []
    # Every rank got every rank's inputs with the case: those copies are the suite's, not the
    # submission's; leave them (and the fingerprints) out.
    ours = {t.untyped_storage().data_ptr() for n in "qkv" for t in c[n]}
    ours.add(prints.untyped_storage().data_ptr())

    def scan() -> dict:
        pending, skip = 0, set(ours)
        tensors = []
        for obj in gc.get_objects():
            if isinstance(obj, dist.Work):
                if not obj.is_completed():
                    pending += 1
                    for t in getattr(obj, "targets", ()) or ():
                        skip.add(t.untyped_storage().data_ptr())
            elif isinstance(obj, torch.Tensor) and obj.dtype == F64 and obj.numel() > 0:
                tensors.append(obj)
        seen: set[int] = set()
        owners: set[int] = set()
        for t in tensors:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in seen or ptr in skip or storage.nbytes() < 8:
                continue
            seen.add(ptr)
            flat = torch.empty(0, dtype=F64).set_(storage)
            hit = torch.isin(prints, flat)
            owners.update(foreign[i][0] for i in range(len(foreign)) if bool(hit[i]))
        return {"pending": pending, "blocks": len(owners)}

    class Probe(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in MATMULS:
                events.append(scan())
            return func(*args, **(kwargs or {}))

    return Probe(), events


def _run_ring(ctx, m, name: str, c: dict) -> dict:
    r = ctx.rank
    q, k, v = (c[n][r].clone() for n in "qkv")
    out: dict[str, Any] = {}
    if c["probe"]:
        import gc

        mode, events = _probe_mode(ctx, c)
        # Every object alive now (the interpreter, torch, the case's inputs) goes to the
        # permanent generation, which gc.get_objects() skips: a scan then walks only what the
        # call made. Nothing of the call can hide there: only gc.freeze() moves objects in.
        gc.freeze()
        ctx.mark(name)
        try:
            with torch.no_grad(), mode:
                res = m.ring_attention(q, k, v, None, c["causal"])
        finally:
            gc.unfreeze()
        ctx.mark(f"{name} end")
        out["events"] = events
    elif c["backward"]:
        q.requires_grad_()
        k.requires_grad_()
        v.requires_grad_()
        ctx.mark(name)
        res = m.ring_attention(q, k, v, None, c["causal"])
        ctx.mark(f"{name} backward")
        res.backward(c["grad"][r])
        ctx.mark(f"{name} end")
        out.update({"q_grad": q.grad, "k_grad": k.grad, "v_grad": v.grad})
    else:
        ctx.mark(name)
        with torch.no_grad():
            res = m.ring_attention(q, k, v, None, c["causal"])
        ctx.mark(f"{name} end")
    out["out"] = res.detach()
    return out


def _run_ulysses(ctx, m, name: str, c: dict) -> dict:
    r = ctx.rank
    q, k, v = (c[n][r].clone() for n in "qkv")
    ctx.mark(name)
    with torch.no_grad():
        # Without causal, the call leaves group and causal to their defaults.
        res = m.ulysses_attention(q, k, v, None, True) if c["causal"] else \
            m.ulysses_attention(q, k, v)
    ctx.mark(f"{name} end")
    return {"out": res}


def _run_ring_group(ctx, m, name: str, c: dict) -> dict | None:
    """Ring attention on a subgroup (its group ranks are not the global ones)."""
    members = c["members"]
    group = ctx.new_group(members)
    if ctx.rank not in members:
        return None
    i = members.index(ctx.rank)
    q, k, v = (c[n][i].clone() for n in "qkv")
    ctx.mark(name)
    with torch.no_grad():
        res = m.ring_attention(q, k, v, group, c["causal"])
    ctx.mark(f"{name} end")
    return {"out": res}


def _run_ulysses_heads(ctx, m, name: str, c: dict) -> str:
    q = torch.zeros(1, c["heads"], 2, 4, dtype=F64)
    try:
        m.ulysses_attention(q, q.clone(), q.clone(), None, False)
    except ValueError:
        return "ValueError"
    return "no error"


def _run_sp_gather(ctx, m, name: str, c: dict) -> dict:
    r = ctx.rank
    x = c["xs"][r].clone().requires_grad_()
    ctx.mark(f"{name} forward")
    y = m.gather_from_sequence_parallel_region(x, None)
    ctx.mark(f"{name} backward")
    y.backward(c["gather_grads"][r])
    ctx.mark(f"{name} end")
    return {"gather": y.detach(), "gather_x_grad": x.grad}


def _run_sp_rs(ctx, m, name: str, c: dict) -> dict:
    r = ctx.rank
    p = c["partials"][r].clone().requires_grad_()
    ctx.mark(f"{name} forward")
    z = m.reduce_scatter_to_sequence_parallel_region(p, None)
    ctx.mark(f"{name} backward")
    z.backward(c["rs_grads"][r])
    ctx.mark(f"{name} end")
    return {"rs": z.detach(), "rs_x_grad": p.grad}


def _run_sp_mlp(ctx, m, name: str, c: dict) -> dict:
    r = ctx.rank
    params = {n: t.clone().requires_grad_() for n, t in c["params"][r].items()}
    x = c["x"][r].clone().requires_grad_()
    ctx.mark(f"{name} forward")
    y = m.sp_mlp_block(x, params["ln_weight"], params["ln_bias"], params["w1"], params["b1"],
                       params["w2"], params["b2"], None)
    ctx.mark(f"{name} backward")
    y.backward(c["grad"][r])
    ctx.mark(f"{name} end")
    out = {"y": y.detach(), "x_grad": x.grad}
    out.update({f"{n}_grad": t.grad for n, t in params.items()})
    return out


def _run_unit(ctx, m, name: str, c: dict) -> Any:  # noqa: C901
    kind = c["kind"]
    if kind == "attn":
        outs = []
        for args in c["calls"]:
            q, k, v, causal, qo, ko = args
            o, lse = m.attention_with_lse(q.clone(), k.clone(), v.clone(), causal, qo, ko)
            outs.append({"out": o, "lse": lse, "q_same": bool(torch.equal(q, args[0]))})
        return outs
    if kind == "merge_blocks":
        got = []
        for parts in c["calls"]:
            left = parts[0]  # ((a b) c) d ...
            for part in parts[1:]:
                left = m.merge(left[0].clone(), left[1].clone(), part[0].clone(),
                               part[1].clone())
            right = parts[-1]  # a (b (c d)) ...
            for part in reversed(parts[:-1]):
                right = m.merge(part[0].clone(), part[1].clone(), right[0].clone(),
                                right[1].clone())
            got.append({"left": list(left), "right": list(right)})
        return got
    if kind == "zigzag":
        return [m.zigzag_split(s, n) for s, n in c["calls"]]
    if kind == "unsplit":
        return [m.zigzag_unsplit([t.clone() for t in shards], dim) for shards, dim in c["calls"]]
    if kind == "attn_default":
        o, lse = m.attention_with_lse(*(t.clone() for t in c["args"]))
        return {"out": o, "lse": lse}
    if kind == "unsplit_default":
        return m.zigzag_unsplit([t.clone() for t in c["shards"]])
    if kind == "sp_rs_invalid":
        try:
            m.reduce_scatter_to_sequence_parallel_region(torch.zeros(1, 3, 2, dtype=F64))
        except ValueError:
            return "ValueError"
        return "no error"
    if kind == "zigzag_invalid":
        got = {}
        for s, n in c["calls"]:
            try:
                m.zigzag_split(s, n)
                got[f"{s},{n}"] = "no error"
            except ValueError:
                got[f"{s},{n}"] = "ValueError"
        return got
    raise ValueError(kind)


def rank_all(ctx, cases: dict[str, dict]) -> dict:
    """Every case of this launch, each in its own error scope (same order on every rank)."""
    box: dict[str, Any] = {}

    def module():
        if "m" not in box:
            box["m"] = ctx.impl_module("context_parallel", "cp")
        return box["m"]

    handlers = {"ring": _run_ring, "ulysses": _run_ulysses, "ulysses_heads": _run_ulysses_heads,
                "sp_gather": _run_sp_gather, "sp_rs": _run_sp_rs, "sp_mlp": _run_sp_mlp,
                "ring_group": _run_ring_group}
    parts = []
    for name, c in cases.items():
        handler = handlers.get(c["kind"], _run_unit)
        parts.append((name, lambda n=name, c=c, h=handler: h(ctx, module(), n, c)))
    return run_cases(ctx, parts)


# ---- parent: the launches ---------------------------------------------------------------------

def values(result, name: str) -> list[Any]:
    return case_values(result.values, name)


def check(actual: Any, want: torch.Tensor, what: str, *, dtype: torch.dtype | None = None,
          tol: Tolerance | None = None, hint: str = "") -> None:
    assert_close(actual, want, what=what, dtype=dtype, tol=tol, hint=hint,
                 hint_first=bool(hint))


def wire_window(result, rank: int, label: str) -> list:
    """The wire records of `rank` made while its latest mark was `label`."""
    return [w for w in result.wire[rank] if w.label == label]
