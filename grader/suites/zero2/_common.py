"""Shared pieces of the zero2 hidden suite.

Parent side: seed-built models, per-rank data and the single-process reference (plain torch,
the mean loss over the global batch); the checks on them are in `_checks`. Rank side: the
training loop and the probes that look at the optimizer under test. Both sides build the model
with `build_model(spec)`, so the same seed gives the same initial weights everywhere.

A `spec` is a plain dict:
    arch        "tiny" (fc1 -> *scale -> fc2 -> head, with a 1-element parameter) or "mlp"
    widths      layer widths of the "mlp" arch, e.g. [4, 24, 48, 3]
    dtype       "float64" or "float32"
    frozen      parameter names with requires_grad=False
    optimizer   "adamw" or "sgd"; defaults: keyword arguments for it
    groups      None (one group of every parameter) or [{"names": [...], **hyperparameters}]
    steps, batch (rows per rank), seed, clip (max_norm or None)
    checkpoint_after   optional: save and resume after this many steps (see rank_train)

`shared_run` trains each of `CONFIGS` once per pytest process, for every module that needs it
(parity, memory and communication, checkpoints read different parts of the same runs).
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from grader.seeds import seeded_generator, shifted
from harness import CommRecord
from harness.cases import Memo
from harness.commlog import as_log
from harness.launcher import preload

# torch.optim imports torch._dynamo on first use: seconds per rank unless the forkserver has it.
preload("torch._dynamo")

# Wall-clock limit of one launch: generous, because a loaded 2-core runner is slow to start
# ranks; a hang still ends.
LAUNCH_TIMEOUT = 180.0
OPTIMIZERS = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}

# Two groups with different lr and weight decay over the tiny model; in every world size the
# suite uses, a group boundary falls inside a shard and fc1.weight straddles a shard boundary.
TWO_GROUPS = [
    {"names": ["fc1.weight", "head.weight", "fc2.weight"], "lr": 1e-2, "weight_decay": 0.1},
    {"names": ["fc1.bias", "scale", "fc2.bias", "head.bias"], "lr": 3e-2, "weight_decay": 0.0},
]


# -- models and data ---------------------------------------------------------------------------
class TinyNet(nn.Module):
    """5 -> 7 -> 7 -> 3 with a 1-element `scale`: 123 parameters in 7 tensors of odd sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 7)
        self.scale = nn.Parameter(torch.ones(1))
        self.fc2 = nn.Linear(7, 7)
        self.head = nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x)) * self.scale
        return self.head(torch.tanh(self.fc2(h)))


def build_model(spec: dict) -> nn.Module:
    """The model of `spec`, initialised from `spec["seed"]`, in `spec["dtype"]`."""
    torch.manual_seed(shifted(spec["seed"]))
    if spec["arch"] == "tiny":
        model: nn.Module = TinyNet()
    else:
        widths = spec["widths"]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(nn.Linear(fan_in, fan_out))
            if i < len(widths) - 2:
                layers.append(nn.Tanh())
        model = nn.Sequential(*layers)
    model = model.to(getattr(torch, spec["dtype"]))
    for name, p in model.named_parameters():
        p.requires_grad_(name not in spec.get("frozen", ()))
    return model


def in_features(spec: dict) -> int:
    return 5 if spec["arch"] == "tiny" else spec["widths"][0]


def out_features(spec: dict) -> int:
    return 3 if spec["arch"] == "tiny" else spec["widths"][-1]


def make_data(spec: dict, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs [steps, world*batch, in] and targets [steps, world*batch, out] of the spec."""
    gen = seeded_generator(spec["seed"] + 1)
    rows = world_size * spec["batch"]
    dtype = getattr(torch, spec["dtype"])
    x = torch.randn(spec["steps"], rows, in_features(spec), generator=gen, dtype=dtype)
    y = torch.randn(spec["steps"], rows, out_features(spec), generator=gen, dtype=dtype)
    return x, y


def rank_slices(x: torch.Tensor, y: torch.Tensor, world_size: int) -> list[tuple]:
    """Per-rank `rank_args`: rank r gets rows [r*b, (r+1)*b) of every step (different data)."""
    b = x.shape[1] // world_size
    return [(x[:, r * b:(r + 1) * b].clone(), y[:, r * b:(r + 1) * b].clone())
            for r in range(world_size)]


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def param_groups(spec: dict, model: nn.Module) -> list[dict[str, Any]]:
    """The spec's parameter groups over `model` (frozen parameters included, as in torch)."""
    named = dict(model.named_parameters())
    if spec.get("groups") is None:
        return [{"params": list(named.values())}]
    return [{**{k: v for k, v in g.items() if k != "names"},
             "params": [named[n] for n in g["names"]]} for g in spec["groups"]]


def trainable_numel(spec: dict) -> int:
    model = build_model(spec)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def shard_numel(spec: dict, world_size: int) -> int:
    return -(-trainable_numel(spec) // world_size)


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# -- the single-process reference (parent) ----------------------------------------------------
@dataclass
class Reference:
    history: list[dict[str, torch.Tensor]]  # parameters after each step
    norms: list[float]  # clip_grad_norm_ results, one per step when spec["clip"]
    states: dict[int, dict]  # optimizer state_dict after step k (for k in `state_after`)
    initial: dict[str, torch.Tensor]


def reference_run(spec: dict, x: torch.Tensor, y: torch.Tensor,
                  state_after: tuple[int, ...] = ()) -> Reference:
    """Train `optimizer_class` on one process over the whole global batch (mean loss)."""
    model = build_model(spec)
    initial = snapshot(model)
    opt = OPTIMIZERS[spec["optimizer"]](param_groups(spec, model), **spec["defaults"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    history, norms, states = [], [], {}
    for step in range(x.shape[0]):
        opt.zero_grad()
        loss_fn(model(x[step]), y[step]).backward()
        if spec.get("clip") is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, spec["clip"])))
        opt.step()
        history.append(snapshot(model))
        if step + 1 in state_after:
            states[step + 1] = copy.deepcopy(opt.state_dict())
    return Reference(history, norms, states, initial)


# -- rank side -----------------------------------------------------------------------------
def make_optimizer(ctx: Any, spec: dict, model: nn.Module, group: Any = None) -> Any:
    zero = ctx.impl_module("zero2", "zero")
    return zero.Zero2Optimizer(param_groups(spec, model),
                               optimizer_class=OPTIMIZERS[spec["optimizer"]], group=group,
                               **spec["defaults"])


def train(ctx: Any, spec: dict, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor,
          steps: range, probe_after: int | None = None, prefix: str = "") -> dict[str, Any]:
    """Run `steps` with a `<prefix>step i` mark before each; returns history, norms, probe."""
    out: dict[str, Any] = {"history": [], "norms": [], "probe": None}
    for step in steps:
        ctx.mark(f"{prefix}step {step}")
        opt.zero_grad()
        loss_fn(model(x[step]), y[step]).backward()
        if spec.get("clip") is not None:
            out["norms"].append(float(opt.clip_grad_norm_(spec["clip"])))
        opt.step()
        if step == probe_after:
            out["probe"] = probe(opt, model, spec)
        out["history"].append(snapshot(model))
    return out


def probe(opt: Any, model: nn.Module, spec: dict) -> dict[str, Any]:
    """What the optimizer holds right after a step (before zero_grad)."""
    inner = opt.inner
    inner_params = [p for g in inner.param_groups for p in g["params"]]
    state_numel: dict[str, int] = {}
    largest = 0
    for st in inner.state.values():
        for key, value in st.items():
            if torch.is_tensor(value) and value.dim() > 0:
                state_numel[key] = state_numel.get(key, 0) + value.numel()
                largest = max(largest, value.numel())
    return {
        "grads_left": [n for n, p in model.named_parameters() if p.grad is not None],
        "is_inner_class": isinstance(inner, OPTIMIZERS[spec["optimizer"]]),
        "inner_numel": sum(p.numel() for p in inner_params),
        "inner_grad_numel": sum(p.grad.numel() for p in inner_params if p.grad is not None),
        "state_numel": state_numel,
        "largest_state": largest,
        "shard_bounds": [int(b) for b in opt.shard_bounds],
    }


def round_trip(obj: Any) -> Any:
    """A deep copy through torch.save, as a checkpoint file would make it."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def rank_train(ctx: Any, spec: dict, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """The standard run: train, probe after the first step, then one step without gradients.

    With `spec["checkpoint_after"] = k`: after step k each rank also saves its state_dict and
    the weights (through torch.save), asks for consolidated_state_dict(dst) for dst 0 and 1,
    and at the end a fresh model and optimizer restored from them train steps k+1.. again.
    """
    model = build_model(spec)
    opt = make_optimizer(ctx, spec, model)
    save_at = spec.get("checkpoint_after")
    out = train(ctx, spec, model, opt, x, y, range(save_at or spec["steps"]), probe_after=0)
    if save_at:
        ctx.mark("checkpoint")
        saved = round_trip(opt.state_dict()), round_trip(model.state_dict())
        out["consolidated"] = {dst: opt.consolidated_state_dict(dst=dst) for dst in (0, 1)}
        rest = train(ctx, spec, model, opt, x, y, range(save_at, spec["steps"]))
        out["history"] += rest["history"]
    ctx.mark("empty step")
    opt.zero_grad()
    opt.step()
    ctx.mark("end")
    out["after_empty_step"] = snapshot(model)
    if save_at:
        fresh = build_model(dict(spec, seed=spec["seed"] + 1000))  # other weights until loaded
        fresh.load_state_dict(saved[1])
        resumed_opt = make_optimizer(ctx, spec, fresh)
        resumed_opt.load_state_dict(saved[0])
        out["resumed"] = train(ctx, spec, fresh, resumed_opt, x, y,
                               range(save_at, spec["steps"]), prefix="resumed ")["history"]
    return out


# -- runs shared by several test modules ------------------------------------------------------
BASE = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 5,
        "batch": 3, "clip": None, "groups": TWO_GROUPS}
CONFIGS = {  # name -> (spec, world size)
    "adamw-3": (dict(BASE, seed=11, optimizer="adamw", defaults={"lr": 1e-2}), 3),
    "sgd-4": (dict(BASE, seed=12, optimizer="sgd", defaults={"lr": 0.05, "momentum": 0.9}), 4),
    "adamw-2-checkpoint": (dict(BASE, seed=13, optimizer="adamw", checkpoint_after=3,
                                defaults={"lr": 1e-2, "betas": (0.8, 0.99)}), 2),
}


@dataclass
class Run:
    values: list[dict]  # per rank, what rank_train returned
    comm: list[list[CommRecord]]  # what the sidecars carried, as a log (harness.commlog.as_log)
    ref: Reference
    spec: dict
    world_size: int


_RUNS = Memo()  # (impl, name) -> Run, or the launch's error


def shared_run(launch: Any, impl: str, name: str) -> Run:
    """CONFIGS[name] trained once per pytest process and --impl, for every module that asks.

    A failed launch is remembered too (harness.cases.Memo), so each test that needs it fails
    at once with the same reason.
    """
    def make() -> Run:
        spec, world_size = CONFIGS[name]
        x, y = make_data(spec, world_size)
        # Over the sidecars: the communication the tests judge is what they carried (as_log),
        # not what the rank logged.
        result = launch(rank_train, world_size=world_size, args=(spec,),
                        rank_args=rank_slices(x, y, world_size), timeout=LAUNCH_TIMEOUT,
                        transport="sidecar")
        state_after = (spec["checkpoint_after"],) if spec.get("checkpoint_after") else ()
        return Run(result.values, [as_log(wire) for wire in result.wire],
                   reference_run(spec, x, y, state_after=state_after), spec, world_size)

    return _RUNS.get((impl, name), make)
