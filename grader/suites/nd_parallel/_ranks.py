"""What travels to the ranks for the nd_parallel suite: rank functions only, and the little
they call. Every case runs in its own error scope (`harness.cases.run_cases`), so a stub or a
crash fails only its case. Ranks get inputs only; the parent judges.

Multi-rank cases label their traffic with `ctx.mark(name)` before the call under test and
`ctx.mark(name + "|end")` after it: the parent cuts the sidecar's wire log by those labels.
The training cases build their own groups (row-major, every rank creating every group in the
same order), so `train_2d`/`train_3d` never depend on the submission's `build_mesh`.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import torch
import torch.distributed as dist

from harness.cases import run_cases

END = "|end"


def _outcome_of_error(fn: Any) -> str:
    try:
        fn()
    except ValueError:
        return "ValueError"
    return "no error"


def _row_major_groups(shape: dict[str, int], axis: str) -> list[list[int]]:
    names = list(shape)
    i = names.index(axis)
    table = list(itertools.product(*(range(n) for n in shape.values())))
    by_rest: dict[tuple[int, ...], list[int]] = {}
    for rank, coords in enumerate(table):
        by_rest.setdefault(coords[:i] + coords[i + 1:], []).append(rank)
    return sorted(by_rest.values(), key=lambda g: g[0])


def _my_groups(ctx: Any, shape: dict[str, int]) -> dict[str, Any]:
    mine = {}
    for axis in shape:
        for members in _row_major_groups(shape, axis):
            group = ctx.new_group(members)
            if ctx.rank in members:
                mine[axis] = group
    return mine


def _layout_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value if value is None or isinstance(value, (int, float, dict)) else \
        f"<{type(value).__name__}>"


# ---- the pure launch (1 rank) -----------------------------------------------------------------

def _mesh_case(m: Any, c: dict) -> Any:
    kind = c["kind"]
    if kind == "coords":
        return [m.mesh_coords(rank, dict(shape)) for rank, shape in c["calls"]]
    if kind == "rank":
        return [m.mesh_rank(dict(coords), dict(shape)) for coords, shape in c["calls"]]
    if kind == "groups":
        return [m.axis_groups(dict(shape), axis) for shape, axis in c["calls"]]
    if kind == "resolve":
        return [m.resolve_shape(dict(shape), world) for shape, world in c["calls"]]
    if kind == "resolve_bad":
        return [_outcome_of_error(lambda s=s, w=w: m.resolve_shape(dict(s), w))
                for s, w in c["calls"]]
    if kind == "coords_bad":
        return [_outcome_of_error(lambda r=r, s=s: m.mesh_coords(r, dict(s)))
                for r, s in c["calls"]]
    if kind == "rank_bad":
        return [_outcome_of_error(lambda k=k, s=s: m.mesh_rank(dict(k), dict(s)))
                for k, s in c["calls"]]
    if kind == "groups_bad":
        return [_outcome_of_error(lambda s=s, a=a: m.axis_groups(dict(s), a))
                for s, a in c["calls"]]
    raise ValueError(kind)


def _shard_case(t: Any, c: dict) -> Any:
    if c["kind"] == "shard_bad":
        return _outcome_of_error(lambda: t.shard_params(
            {k: v.clone() for k, v in c["params"].items()}, c["j"], c["t"]))
    params = {k: v.clone() for k, v in c["params"].items()}
    out = t.shard_params(params, c["j"], c["t"])
    unchanged = all(torch.equal(params[k], c["params"][k]) for k in params)
    kept = {k: v.clone() for k, v in out.items()}
    for v in out.values():  # new tensors: writing them must leave the input alone
        v.add_(1.0)
    separate = all(torch.equal(params[k], c["params"][k]) for k in params)
    return {"shards": kept, "input_unchanged": unchanged and separate}


def _planner_case(p: Any, specs: Any, c: dict) -> Any:
    kind = c["kind"]
    model = specs.Model(**c["model"]) if "model" in c else None
    cluster = specs.Cluster(**c["cluster"]) if "cluster" in c else None
    layout = specs.Layout(**c["layout"]) if "layout" in c else None
    if kind == "param_count":
        return p.param_count(model)
    if kind == "memory":
        return dict(p.memory_per_gpu(model, layout, c["gb"]))
    if kind == "collective":
        return p.collective_time(*c["args"])
    if kind == "comm":
        return dict(p.comm_time(model, cluster, layout, c["gb"]))
    if kind == "bubble":
        return p.bubble_fraction(*c["args"])
    if kind == "step":
        return p.step_time(model, cluster, layout, c["gb"])
    if kind == "best":
        return _layout_plain(p.best_layout(model, cluster, c["gb"], c["micro_batch"]))
    if kind == "kv":
        return p.kv_cache_bytes(model, *c["args"])
    if kind == "decode":
        return p.decode_latency(model, cluster, *c["args"])
    if kind == "throughput":
        return p.decode_throughput(model, cluster, *c["args"])
    if kind == "min_tp":
        return p.min_tp_for_latency(model, cluster, *c["args"])
    if kind == "bad":
        fn = getattr(p, c["function"])
        args = [specs.Model(**a["model"]) if "model" in a else
                specs.Cluster(**a["cluster"]) if "cluster" in a else
                specs.Layout(**a["layout"]) if "layout" in a else a["value"]
                for a in c["args"]]
        return _outcome_of_error(lambda: fn(*args))
    raise ValueError(kind)


def rank_pure(ctx: Any, cases: dict[str, dict]) -> dict:
    """The pure functions: mesh arithmetic, shard_params and the planner, in one process."""
    box: dict[str, Any] = {}

    def module(name: str) -> Any:
        if name not in box:
            box[name] = ctx.impl_module("nd_parallel", name)
        return box[name]

    def run(c: dict) -> Any:
        if c["group"] == "mesh":
            return _mesh_case(module("mesh"), c)
        if c["group"] == "shard":
            return _shard_case(module("train"), c)
        from assignments.nd_parallel import specs

        return _planner_case(module("planner"), specs, c)

    return run_cases(ctx, [(name, lambda c=c: run(c)) for name, c in cases.items()])


# ---- the multi-rank launches (sidecar) --------------------------------------------------------

def _build(ctx: Any, m: Any, name: str, c: dict) -> Any:
    if c["kind"] == "build_bad":
        return _outcome_of_error(lambda: m.build_mesh(dict(c["shape"])))
    mesh = m.build_mesh(dict(c["shape"]))
    out: dict[str, Any] = {"shape": dict(mesh.shape), "coords": dict(mesh.coords), "axes": {},
                           "unknown": [_outcome_of_error(lambda f=f: f("no such axis")) for f in
                                       (mesh.group, mesh.ranks, mesh.size, mesh.local_rank)]}
    for axis in c["shape"]:
        mask = torch.tensor([1 << ctx.rank], dtype=torch.int64)
        ctx.mark(f"{name}|{axis}")
        dist.all_reduce(mask, group=mesh.group(axis))
        ctx.mark(f"{name}{END}")
        out["axes"][axis] = {"mask": int(mask.item()), "ranks": list(mesh.ranks(axis)),
                             "size": mesh.size(axis), "local_rank": mesh.local_rank(axis)}
    return out


def _train(ctx: Any, t: Any, name: str, c: dict) -> Any:
    mine = _my_groups(ctx, dict(c["mesh"]))
    kwargs = {"lr": c["lr"], "momentum": c["momentum"], "steps": c["x"].shape[0],
              "tp_group": mine["tp"], "dp_group": mine["dp"]}
    if "zero" in c["mesh"]:
        kwargs["zero_group"] = mine["zero"]
    fn = t.train_3d if "zero" in c["mesh"] else t.train_2d
    params = {k: v.clone() for k, v in c["params"].items()}
    x, y = c["x"].clone(), c["y"].clone()
    if c["kind"] == "train_bad":
        return _outcome_of_error(lambda: fn(params, x, y, **kwargs))
    ctx.mark(name)
    got = fn(params, x, y, **kwargs)
    ctx.mark(f"{name}{END}")
    shards = got[0] if "zero" in c["mesh"] else got
    detached = all(not t.requires_grad and t.grad_fn is None for t in shards.values())
    if "zero" in c["mesh"]:
        return {"shards": dict(shards), "momentum": got[1], "detached": detached}
    return {"shards": dict(shards), "detached": detached}


def rank_multi(ctx: Any, cases: dict[str, dict]) -> dict:
    """build_mesh and training cases, each in its own error scope, the same order everywhere."""
    box: dict[str, Any] = {}

    def module(name: str) -> Any:
        if name not in box:
            box[name] = ctx.impl_module("nd_parallel", name)
        return box[name]

    def run(name: str, c: dict) -> Any:
        if c["kind"].startswith("build"):
            return _build(ctx, module("mesh"), name, c)
        return _train(ctx, module("train"), name, c)

    return run_cases(ctx, [(name, lambda n=name, c=c: run(n, c)) for name, c in cases.items()])
