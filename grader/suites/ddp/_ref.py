"""References and checks of the ddp hidden suite, in the parent.

Single-process plain torch in float64 on the global batch, built from rank 0's seed (the
wrapper broadcasts rank 0's replica); the README's rules in the parent's own copies (bucket
packing, the two AdamW groups, the learning-rate schedule); the tolerances; and the reading of
the wire log's records. Nothing here imports the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from grader.compare import Tolerance, bound, steps_bound
from grader.suites.ddp._ranks import build_model, loss_fn, state_of


# -- references (plain torch, one process) -----------------------------------------------------
def reference_train(spec: dict, seed: int, x: torch.Tensor, y: torch.Tensor,
                    make_opt: Callable[[nn.Module], torch.optim.Optimizer],
                    lrs: Sequence[float] | None = None) -> list[dict[str, torch.Tensor]]:
    """Parameters after each step of single-process training on the global batch."""
    model = build_model(spec, seed)
    opt = make_opt(model)
    history = [state_of(model)]
    for step in range(x.shape[0]):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[step]
        opt.zero_grad()
        loss_fn(model(x[step]), y[step]).backward()
        opt.step()
        history.append(state_of(model))
    return history  # history[0] is the initial state


def two_groups(model: nn.Module, lr: float, weight_decay: float,
               betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8
               ) -> torch.optim.AdamW:
    """The README's rule, the parent's own copy: matrices decay, vectors and scalars do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=lr, betas=betas, eps=eps)


def expected_lr(step: int, max_lr: float, min_lr: float, warmup: int, total: int) -> float:
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step > total:
        return min_lr
    t = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * t)) * (max_lr - min_lr)


def local_grads(spec: dict, seed: int, x: torch.Tensor, y: torch.Tensor,
                **forward_kw: Any) -> dict[str, torch.Tensor]:
    """Gradients of one backward of the seed's replica on (x, y); zeros where none."""
    model = build_model(spec, seed)
    loss_fn(model(x, **forward_kw), y).backward()
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
            for n, p in model.named_parameters() if p.requires_grad}


def pack(spec: dict, seed: int = 0) -> list[list[str]]:
    """The README's packing rule (parent's own copy), with each bucket's bytes."""
    return [names for names, _ in pack_with_bytes(spec, seed)]


def pack_with_bytes(spec: dict, seed: int = 0, reverse: bool = True
                    ) -> list[tuple[list[str], int]]:
    model = build_model(spec, seed)
    cap = spec["cap_mb"] * 1024 * 1024
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if reverse:
        named.reverse()
    buckets: list[tuple[list[str], int]] = []
    names: list[str] = []
    used = 0
    for name, p in named:
        size = p.numel() * p.element_size()
        if names and used + size > cap:
            buckets.append((names, used))
            names, used = [], 0
        names.append(name)
        used += size
    if names:
        buckets.append((names, used))
    return buckets


def buffer_bytes(spec: dict) -> int:
    return sum(t.numel() * t.element_size() for t in build_model(spec, 0).buffers())


def state_bytes(spec: dict) -> int:
    model = build_model(spec, 0)
    return sum(t.numel() * t.element_size()
               for t in list(model.parameters()) + list(model.buffers()))


# -- tolerances --------------------------------------------------------------------------------
DEPTH_PER_STEP = 64  # forward + backward of a width-8 MLP on <= 24 rows, and the rank average


def training_tol(history: Sequence[dict[str, torch.Tensor]], steps: int,
                 growth: float) -> Tolerance:
    """Carried through `steps` updates, each amplifying what it inherits by up to `growth`."""
    magnitude = max(float(t.abs().max()) for state in history for t in state.values())
    return steps_bound(torch.float64, steps=steps, depth_per_step=DEPTH_PER_STEP,
                       growth=growth, magnitude=max(magnitude, 1.0))


def grad_tol(grads: dict[str, torch.Tensor]) -> Tolerance:
    magnitude = max(float(g.abs().max()) for g in grads.values())
    return bound(torch.float64, depth=DEPTH_PER_STEP, magnitude=max(magnitude, 1e-3))


# -- messages ----------------------------------------------------------------------------------
def allreduces(records: Sequence[Any]) -> list[Any]:
    return [r for r in records if r.kind == "allreduce"]


def describe_kinds(records: Sequence[Any]) -> str:
    kinds: dict[str, int] = {}
    for r in records:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in kinds.items()) or "nothing"
