"""Rank side of the ddp suites: models, probes and the cases each launch runs.

Everything here runs inside rank processes (the functions travel by value). Inputs, seeds and
hyperparameters come from the parent; no expected value is computed here. Each case marks the
phases it enters (`Probe.mark`): the sidecar labels every operation it carries with the rank's
latest mark, so the parent cuts the wire log (written outside the rank) into phases: a case's
construction, each step before backward reaches the first layer ("<case> step s"), after it
("<case> step s tap"), after backward ("<case> step s end").

The first layer's output passes through `Tap`, an identity whose backward marks "... tap":
autograd runs it right before it computes the first layer's gradients, so an all-reduce carried
under the step's own label was issued before the last gradient existed (overlap).
`Probe` also wraps the sidecar's work handles' `wait` before the code under test is imported:
a wait under a step's own label is a handle waited on before backward reached the first layer.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.cases import run_cases

OPTIMIZERS = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}


# -- models (the parent builds the same ones for its references) -------------------------------
class Tap(torch.autograd.Function):
    """Identity; its backward calls `callback()` (when not None) before passing the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, callback: Callable[[], None] | None) -> torch.Tensor:
        ctx.callback = callback
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.callback is not None:
            ctx.callback()
        return grad, None


BUFFER_SEED = 2718


class Net(nn.Module):
    """fc1 -> tap -> tanh(+shift) [-> dropout] -> fc2 [-> norm] -> tanh -> head [+ extra].

    `spec`: sizes (in, hidden, out), norm (LayerNorm after fc2), dropout (p), extra (a second
    head used when forward gets use_extra=True, or when not told and `self.use_extra` is
    set), ghost (a layer never used). Registration
    order: fc1, fc2, [norm], head, [extra], [ghost]; one buffer `shift`.
    """

    def __init__(self, spec: dict) -> None:
        super().__init__()
        n_in, hidden, n_out = spec["sizes"]
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden) if spec.get("norm") else None
        self.head = nn.Linear(hidden, n_out)
        self.extra = nn.Linear(hidden, n_out) if spec.get("extra") else None
        self.ghost = nn.Linear(hidden, 2) if spec.get("ghost") else None
        shift = 0.1 * torch.randn(hidden)  # drawn either way: the seed's stream stays the same
        if not spec.get("rank_buffer"):
            shift = 0.1 * torch.randn(hidden, generator=torch.Generator().manual_seed(BUFFER_SEED))
        self.register_buffer("shift", shift)
        self.p_drop = float(spec.get("dropout", 0.0))
        self.on_tap: Callable[[], None] | None = None
        self.use_extra = False  # what forward does when not told

    def forward(self, x: torch.Tensor, use_extra: bool | None = None) -> torch.Tensor:
        use_extra = self.use_extra if use_extra is None else use_extra
        h = torch.tanh(Tap.apply(self.fc1(x), self.on_tap) + self.shift)
        if self.p_drop:
            h = F.dropout(h, self.p_drop, self.training)
        h = self.fc2(h)
        if self.norm is not None:
            h = self.norm(h)
        h = torch.tanh(h)
        out = self.head(h)
        if use_extra and self.extra is not None:
            out = out + self.extra(h)
        return out


class TiedNet(nn.Module):
    """Embedding whose weight the output layer shares (a parameter under two names)."""

    def __init__(self, spec: dict) -> None:
        super().__init__()
        vocab, width = spec["sizes"]
        self.emb = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)
        self.out.weight = self.emb.weight
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(torch.tanh(self.mix(self.emb(x))))) * self.scale


def build_model(spec: dict, seed: int) -> nn.Module:
    """The spec's model initialised from `seed` (already shifted by the parent)."""
    torch.manual_seed(seed)
    model: nn.Module
    if spec.get("arch") == "tied":
        model = TiedNet(spec)
    elif spec.get("arch") == "seq":  # Linear layers of the given widths, biases optional
        widths, biases = spec["widths"], spec["biases"]
        model = nn.Sequential(*[nn.Linear(a, b, bias=bias)
                                for a, b, bias in zip(widths[:-1], widths[1:], biases)])
    else:
        model = Net(spec)
    model = model.to(getattr(torch, spec.get("dtype", "float64")))
    for name, p in model.named_parameters():
        p.requires_grad_(name not in spec.get("frozen", ()))
    return model


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by name, detached copies."""
    out = {n: p.detach().clone() for n, p in model.named_parameters()}
    out.update({n: b.detach().clone() for n, b in model.named_buffers()})
    return out


def grads_of(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: (None if p.grad is None else p.grad.detach().clone())
            for n, p in model.named_parameters()}


# -- the probe ---------------------------------------------------------------------------------
class Probe:
    """Marks phases (for the wire log) and records, per mark, how many handles were waited on.

    Built before the code under test is imported: it wraps the sidecar transport's work
    handle class, the only kind of handle the ranks get with `transport="sidecar"`. A wait
    made by `get_future()` (which the transport fulfils at once) is not counted: chaining a
    future, as torch's communication hooks do, is not waiting.
    """

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.label = ""
        self.waits: dict[str, int] = {}  # label -> handles waited on
        self.futures: dict[str, int] = {}  # label -> futures asked for
        self.step = 0
        try:
            from harness import sidecar
        except ImportError:  # pragma: no cover - the harness always has it
            return
        original, original_future = sidecar.SidecarWork.wait, sidecar.SidecarWork.get_future
        probe = self
        inside_future = [False]

        def wait(work: Any, timeout: Any = None) -> bool:
            if not inside_future[0]:
                probe.waits[probe.label] = probe.waits.get(probe.label, 0) + 1
            return original(work) if timeout is None else original(work, timeout)

        def get_future(work: Any) -> Any:
            # The transport completes a future at once (it carries collectives synchronously);
            # asking for one is not waiting, so the wait inside it is not counted.
            probe.futures[probe.label] = probe.futures.get(probe.label, 0) + 1
            inside_future[0] = True
            try:
                return original_future(work)
            finally:
                inside_future[0] = False

        sidecar.SidecarWork.wait = wait  # type: ignore[method-assign]
        sidecar.SidecarWork.get_future = get_future  # type: ignore[method-assign]

    def mark(self, label: str) -> None:
        self.label = label
        self.ctx.mark(label)

    def tap_for(self, name: str) -> Callable[[], None]:
        def tap() -> None:
            self.mark(f"{name} step {self.step} tap")
        return tap


# -- cases: the wrapper on its own -------------------------------------------------------------
def case_train(ctx: Any, probe: Probe, mod: Any, name: str, spec: dict, data: dict) -> dict:
    """Wrap a replica built from this rank's own seed, train `steps` with a plain torch
    optimizer; per step: params after it, and the gradients of step 0."""
    model = build_model(spec, data["init_seed"])
    probe.mark(f"{name} construct")
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    after_construct = state_of(model)
    layout = wrapped.bucket_layout
    model.on_tap = probe.tap_for(name)
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
    model.on_tap = probe.tap_for(name)
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
        row = []
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
        model.use_extra = step == 0
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


def case_world_of_one(mod: Any, spec: dict, data: dict) -> dict:
    model = build_model(spec, data["init_seed"])
    wrapped = mod.DistributedDataParallel(model, bucket_cap_mb=spec["cap_mb"])
    loss_fn(wrapped(data["x"][0]), data["y"][0]).backward()
    return {"grads": grads_of(model), "params": state_of(model)}


# -- the launches' rank functions --------------------------------------------------------------
WRAPPER_CASES = {"train": case_train, "no_sync": case_no_sync, "unused": case_unused,
                 "bf16": case_bf16, "subgroups": case_subgroups, "construct": case_construct}
TRAINER_CASES = {"accumulate": case_accumulate, "checkpoint": case_checkpoint}


def rank_cases(ctx: Any, cases: list[dict], data: dict) -> dict:
    """Run `cases` (each {"name", "kind", "spec"...}) with this rank's `data[name]`.

    The probe is built before the code under test is imported (see the module doc)."""
    probe = Probe(ctx)

    def make(case: dict) -> Callable[[], Any]:
        kind, name = case["kind"], case["name"]

        def run() -> Any:
            if kind in WRAPPER_CASES:
                mod = ctx.impl_module("ddp", "ddp")
                return WRAPPER_CASES[kind](ctx, probe, mod, name, case["spec"], data[name])
            if kind == "layouts":
                mod = ctx.impl_module("ddp", "ddp")
                return case_layouts(ctx, probe, mod, name, case["specs"], case["seed"])
            if kind == "world_of_one":
                return case_world_of_one(ctx.impl_module("ddp", "ddp"), case["spec"],
                                         data[name])
            if kind == "random_layouts":  # world of one, in-rank: no probe needed
                return case_layouts(ctx, None, ctx.impl_module("ddp", "ddp"), name,
                                    case["specs"], case["seed"])
            if kind == "default_cap":
                mod = ctx.impl_module("ddp", "ddp")
                return mod.DistributedDataParallel(build_model(case["spec"], 0)).bucket_layout
            if kind in ("no_group_wrapper", "no_group_bf16"):
                return case_no_group_wrapper(ctx.impl_module("ddp", "ddp"), case["spec"],
                                             data[name], hook=kind == "no_group_bf16")
            trainer = ctx.impl_module("ddp", "trainer")
            if kind in TRAINER_CASES:
                mod = ctx.impl_module("ddp", "ddp")
                return TRAINER_CASES[kind](ctx, probe, mod, trainer, name, case["spec"],
                                           data[name])
            if kind == "lr":
                return case_lr(trainer, case["configs"])
            if kind == "groups":
                return case_groups(trainer, case["spec"], case["seed"], case["kwargs"])
            if kind == "train_step_empty":
                return case_train_step_empty(trainer, case["spec"], case["seed"])
            if kind == "train_step_sparse":
                return case_train_step_sparse(trainer, case["spec"], data[name])
            if kind == "no_group_trainer":
                return case_no_group_trainer(trainer, case["spec"], data[name])
            raise ValueError(f"unknown case kind {kind!r}")

        return run

    return run_cases(ctx, [(case["name"], make(case)) for case in cases])
