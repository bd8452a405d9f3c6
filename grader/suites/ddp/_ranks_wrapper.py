"""Rank side of the ddp suite: the cases of the wrapper on its own (what `DistributedDataParallel`
and `bf16_compress_hook` do). Each case marks the phases it enters (`_ranks.Probe`).
"""

from __future__ import annotations

from typing import Any, cast

import torch.distributed as dist

from grader.suites.ddp._ranks import (
    OPTIMIZERS,
    Net,
    Probe,
    build_model,
    grads_of,
    loss_fn,
    state_of,
)


# -- cases: the wrapper on its own -------------------------------------------------------------
def case_train(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    """Wrap a replica built from this rank's own seed, train `steps` with a plain torch
    optimizer; per step: params after it, and the gradients of step 0."""
    model = build_model(spec, data["init_seed"])
    probe.mark(f"{name} construct")
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    after_construct = state_of(model)
    layout = wrapped.bucket_layout
    cast(Net, model).on_tap = probe.tap_for(name)  # the specs of these cases build a Net
    opt = OPTIMIZERS[spec["optimizer"]](model.parameters(), **spec["defaults"])
    history, grads0 = [], None
    x, y = data["x"], data["y"]
    for step in range(x.shape[0]):
        probe.step = step
        probe.mark(f"{name} step {step}")
        opt.zero_grad()
        loss_fn(wrapped(x[step]), y[step]).backward()
        probe.mark(f"{name} step {step} end")
        if step == 0:
            grads0 = grads_of(model)
        opt.step()
        history.append(state_of(model))
    probe.mark(f"{name} done")
    return {"after_construct": after_construct, "layout": layout, "history": history,
            "grads0": grads0, "waits": dict(probe.waits), "futures": dict(probe.futures)}


def case_no_sync(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    """k micro-batches: the first k-1 backward passes inside no_sync(), the last outside."""
    model = build_model(spec, data["init_seed"])
    probe.mark(f"{name} construct")
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    x, y = data["x"], data["y"]
    k = x.shape[0]
    probe.mark(f"{name} inside")
    with wrapped.no_sync():
        for j in range(k - 1):
            loss_fn(wrapped(x[j]), y[j]).backward()
    local = grads_of(model)
    probe.mark(f"{name} sync")
    loss_fn(wrapped(x[k - 1]), y[k - 1]).backward()
    probe.mark(f"{name} end")
    return {"local": local, "grads": grads_of(model), "layout": wrapped.bucket_layout}


def case_layouts(ctx: Any, probe: Probe | None, mod: Any, name: str, specs: list[dict],
                 seed: int) -> list:
    """bucket_layout of each (spec, cap) pair; no backward."""
    out = []
    for i, spec in enumerate(specs):
        if probe is not None:
            probe.mark(f"{name} {i}")
        wrapped = mod.DistributedDataParallel(build_model(spec, seed), bucket_cap_mb=spec["cap_mb"])
        out.append(wrapped.bucket_layout)
    if probe is not None:
        probe.mark(f"{name} done")
    return out


def case_unused(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    """`extra` is used by rank 0 in the first backward only; `ghost` never. Grads after each."""
    model = build_model(spec, data["init_seed"])
    if spec["find_unused"] is None:  # the default
        wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    else:
        wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"],
                                              find_unused_parameters=spec["find_unused"])
    x, y = data["x"], data["y"]
    grads = []
    for step in range(x.shape[0]):
        probe.mark(f"{name} step {step}")
        for p in model.parameters():
            p.grad = None
        use = ctx.rank == 0 and step == 0  # extra: rank 0 in step 0 only, then nobody
        loss_fn(wrapped(x[step], use_extra=use), y[step]).backward()
        grads.append(grads_of(model))
    probe.mark(f"{name} done")
    return {"grads": grads, "params": state_of(model)}


def case_bf16(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    model = build_model(spec, data["init_seed"])
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    wrapped.register_comm_hook(mod.bf16_compress_hook)
    params = state_of(model)
    cast(Net, model).on_tap = probe.tap_for(name)  # the specs of these cases build a Net
    probe.step = 0
    probe.mark(f"{name} step 0")
    loss_fn(wrapped(data["x"][0]), data["y"][0]).backward()
    probe.mark(f"{name} done")
    return {"grads": grads_of(model), "params": params, "layout": wrapped.bucket_layout,
            "waits": dict(probe.waits), "futures": dict(probe.futures)}


def case_construct(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    """Only the constructor, on a replica whose buffer is this rank's own too: its state after."""
    model = build_model(spec, data["init_seed"])
    probe.mark(f"{name} construct")
    mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    return {"after_construct": state_of(model)}


def case_subgroups(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    """Ranks {0, 1} and {2, 3} each wrap their replica over their own process group."""
    groups = [ctx.new_group([0, 1]), ctx.new_group([2, 3])]
    model = build_model(spec, data["init_seed"])
    probe.mark(f"{name} construct")
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"],
                                          group=groups[ctx.rank // 2])
    after = state_of(model)
    probe.mark(f"{name} step 0")
    loss_fn(wrapped(data["x"][0]), data["y"][0]).backward()
    probe.mark(f"{name} done")
    return {"after_construct": after, "grads": grads_of(model)}


def case_no_group_wrapper(mod: Any, spec: dict, data: dict, hook: bool) -> dict:
    """No process group at all (destroyed first): a world of one."""
    if dist.is_initialized():
        dist.destroy_process_group()
    model = build_model(spec, data["init_seed"])
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    if hook:
        wrapped.register_comm_hook(mod.bf16_compress_hook)
    loss_fn(wrapped(data["x"][0]), data["y"][0]).backward()
    return {"grads": grads_of(model), "params": state_of(model)}


def case_world_of_one(mod: Any, spec: dict, data: dict) -> dict:
    model = build_model(spec, data["init_seed"])
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    loss_fn(wrapped(data["x"][0]), data["y"][0]).backward()
    return {"grads": grads_of(model), "params": state_of(model)}
