"""What travels to the ranks of the context_parallel hidden suite: `rank_all` runs each case of a
launch in its own error scope (`harness.cases.run_cases`), so a stub costs only the tests that
read its cases. Ranks get inputs only (the parent strips each case's expected part).

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

from typing import Any

import torch

from harness.cases import run_cases

F64 = torch.float64
MATMULS = ("matmul", "__matmul__", "__rmatmul__", "einsum", "bmm", "mm", "baddbmm",
           "scaled_dot_product_attention", "tensordot")


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
        got: list[dict[str, Any]] = []
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
        raised: dict[str, str] = {}
        for s, n in c["calls"]:
            try:
                m.zigzag_split(s, n)
                raised[f"{s},{n}"] = "no error"
            except ValueError:
                raised[f"{s},{n}"] = "ValueError"
        return raised
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
