"""Rank side of the ddp suite: the cases of the trainer (`make_optimizer`, `train_step`,
`get_lr`, `save_checkpoint`, `load_checkpoint`), with the wrapper or on a plain module.
"""

from __future__ import annotations

import io
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from grader.suites.ddp._ranks import Net, Probe, build_model, loss_fn, state_of


# -- cases: the trainer ------------------------------------------------------------------------
def case_accumulate(ctx: Any, probe: Probe, ddp: Any, trainer: Any, name: str, spec: dict,
                    data: dict) -> dict:
    """The wrapper + make_optimizer + train_step with k micro-batches per step."""
    model = build_model(spec, data["init_seed"])
    probe.mark(f"{name} construct")
    wrapped = ddp.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    opt = trainer.make_optimizer(model, **spec["defaults"])
    x, y = data["x"], data["y"]  # [steps, k, rows, ...]
    history, losses = [], []
    for step in range(x.shape[0]):
        probe.mark(f"{name} step {step}")
        micro = [(x[step, j], y[step, j]) for j in range(x.shape[1])]
        losses.append(trainer.train_step(wrapped, opt, micro, loss_fn, spec["lrs"][step]))
        history.append(state_of(model))
    probe.mark(f"{name} done")
    return {"history": history, "losses": losses, "layout": wrapped.bucket_layout}


def _round_trip(obj: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def case_checkpoint(ctx: Any, probe: Probe, ddp: Any, trainer: Any, name: str, spec: dict,
                    data: dict) -> dict:
    """Train with dropout, checkpoint after `save_after` steps, carry on to the end; then a
    fresh replica (other seed, disturbed RNG) loads the checkpoint and trains the rest again."""
    x, y, save_after = data["x"], data["y"], spec["save_after"]
    torch.manual_seed(data["rng_seed"])

    def run(model: nn.Module, opt: Any, wrapped: Any, steps: range, tag: str) -> list:
        history = []
        for step in steps:
            probe.mark(f"{name} {tag} step {step}")
            for group in opt.param_groups:
                group["lr"] = spec["lrs"][step]
            opt.zero_grad()
            loss_fn(wrapped(x[step]), y[step]).backward()
            opt.step()
            history.append(state_of(model))
        return history

    model = build_model(spec, data["init_seed"])
    wrapped = ddp.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    opt = torch.optim.AdamW(model.parameters(), **spec["defaults"])
    torch.manual_seed(data["rng_seed"])
    history = run(model, opt, wrapped, range(save_after), "first")
    probe.mark(f"{name} save")
    saved = trainer.save_checkpoint(wrapped, opt, save_after)
    returned = saved is not None
    blob = _round_trip(saved) if returned else None
    history += run(model, opt, wrapped, range(save_after, x.shape[0]), "first")
    # The suite, not the code under test, hands rank 0's checkpoint to every rank (as a
    # shared file system would).
    probe.mark(f"{name} share")
    box = [blob if ctx.rank == 0 else None]
    if ctx.world_size > 1:
        dist.broadcast_object_list(box, src=0)
    checkpoint = box[0]
    resumed: list = []
    step = None
    if checkpoint is not None:
        fresh = build_model(spec, data["init_seed"] + 7919)
        wrapped2 = ddp.DistributedDataParallel(fresh, bucket_cap_mb=spec["cap_mb"])
        opt2 = torch.optim.AdamW(fresh.parameters(), **spec["defaults"])
        torch.manual_seed(data["rng_seed"] + 104729)  # a different RNG until the load
        probe.mark(f"{name} load")
        step = trainer.load_checkpoint(checkpoint, wrapped2, opt2)
        resumed = run(fresh, opt2, wrapped2, range(int(step), x.shape[0]), "resumed")
    probe.mark(f"{name} done")
    return {"returned": returned, "history": history, "resumed": resumed, "step": step}


# -- cases: pure functions ---------------------------------------------------------------------
def case_lr(trainer: Any, configs: list[dict]) -> list:
    """get_lr at every listed step of each config; an error becomes its type's name."""
    out = []
    for config in configs:
        row: list[float | str] = []
        for step in config["steps"]:
            try:
                row.append(float(trainer.get_lr(step, config["max_lr"], config["min_lr"],
                                                config["warmup_steps"], config["total_steps"])))
            except NotImplementedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the type is the answer
                row.append(type(exc).__name__)
        out.append(row)
    return out


def case_groups(trainer: Any, spec: dict, seed: int, kwargs: dict) -> dict:
    model = build_model(spec, seed)
    opt = trainer.make_optimizer(model, **kwargs)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = []
    for group in opt.param_groups:
        groups.append({"names": [names.get(id(p), "<not a parameter of the model>")
                                 for p in group["params"]],
                       **{k: group[k] for k in ("lr", "weight_decay", "eps", "amsgrad",
                                                "maximize")},
                       "betas": list(group["betas"])})
    return {"is_adamw": type(opt) is torch.optim.AdamW, "groups": groups}


def case_train_step_empty(trainer: Any, spec: dict, seed: int) -> str:
    model = build_model(spec, seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        trainer.train_step(model, opt, [], loss_fn, 0.1)
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the type is the answer
        return type(exc).__name__
    return "no error"


def case_train_step_sparse(trainer: Any, spec: dict, data: dict) -> dict:
    """train_step with one micro-batch per step on a plain module, AdamW; `extra` takes part
    in the first step only (so in the second it has no gradient, and AdamW must skip it)."""
    model = build_model(spec, data["init_seed"])
    opt = torch.optim.AdamW(model.parameters(), **spec["defaults"])
    x, y = data["x"], data["y"]
    history, losses = [], []
    for step in range(x.shape[0]):
        cast(Net, model).use_extra = step == 0  # SPARSE builds a Net
        losses.append(trainer.train_step(model, opt, [(x[step], y[step])], loss_fn,
                                         spec["lrs"][step]))
        history.append(state_of(model))
    return {"history": history, "losses": losses}


def case_no_group_trainer(trainer: Any, spec: dict, data: dict) -> dict:
    """save_checkpoint / load_checkpoint with no process group at all (a world of one)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    model = build_model(spec, data["init_seed"])
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = data["x"], data["y"]
    torch.manual_seed(data["rng_seed"])

    def step(m: nn.Module, o: Any, i: int) -> None:
        o.zero_grad()
        loss_fn(m(x[i]), y[i]).backward()
        o.step()

    step(model, opt, 0)
    saved = trainer.save_checkpoint(model, opt, 1)
    checkpoint = None if saved is None else _round_trip(saved)
    step(model, opt, 1)
    out = {"returned": saved is not None, "step": None, "same": False}
    if checkpoint is not None:
        fresh = build_model(spec, data["init_seed"] + 5)
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.01)
        torch.manual_seed(data["rng_seed"] + 9)
        out["step"] = trainer.load_checkpoint(checkpoint, fresh, fresh_opt)
        step(fresh, fresh_opt, 1)
        out["same"] = all(torch.equal(a, b) for a, b in zip(model.parameters(),
                                                             fresh.parameters()))
    return out
