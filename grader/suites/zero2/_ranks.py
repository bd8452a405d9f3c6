"""What travels to the ranks of the zero2 hidden suite: the training loop and the probes that
look at the optimizer under test.

Both sides build the model with `build_model(spec)` (the parent's reference in `_ref` imports
it from here), so the same seed gives the same initial weights everywhere.
"""

from __future__ import annotations

import io
from typing import Any

import torch
from torch import nn

from grader.seeds import shifted
from harness.launcher import preload

# torch.optim imports torch._dynamo on first use: seconds per rank unless the forkserver has it.
preload("torch._dynamo")


OPTIMIZERS = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


# -- models ----------------------------------------------------------------------------------
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


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def param_groups(spec: dict, model: nn.Module) -> list[dict[str, Any]]:
    """The spec's parameter groups over `model` (frozen parameters included, as in torch)."""
    named = dict(model.named_parameters())
    if spec.get("groups") is None:
        return [{"params": list(named.values())}]
    return [{**{k: v for k, v in g.items() if k != "names"},
             "params": [named[n] for n in g["names"]]} for g in spec["groups"]]


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# -- training and probes ---------------------------------------------------------------------
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
