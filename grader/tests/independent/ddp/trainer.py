"""An independent trainer for ddp (not the reference), written from the stub's docstrings and
README §7 only: AdamW groups, warm-up + cosine schedule, accumulation, bit-exact checkpoints.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _inner(model: nn.Module) -> nn.Module:
    wrapped = getattr(model, "module", None)
    if hasattr(model, "no_sync") and isinstance(wrapped, nn.Module):
        return wrapped
    return model


def make_optimizer(model: nn.Module, lr: float, weight_decay: float,
                   betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8) -> torch.optim.AdamW:
    matrices: list[torch.Tensor] = []
    vectors: list[torch.Tensor] = []
    for p in model.parameters():
        if p.requires_grad:
            (matrices if p.dim() >= 2 else vectors).append(p)
    groups = [{"params": matrices, "weight_decay": weight_decay},
              {"params": vectors, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def get_lr(step: int, max_lr: float, min_lr: float, warmup_steps: int,
           total_steps: int) -> float:
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got {warmup_steps}, "
                         f"{total_steps}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if step < warmup_steps:
        return float(max_lr * (step + 1) / warmup_steps)
    if step > total_steps:
        return float(min_lr)
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return float(min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (max_lr - min_lr))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], loss_fn: LossFn,
               lr: float) -> float:
    batches = list(micro_batches)
    k = len(batches)
    if k == 0:
        raise ValueError("train_step needs at least one micro-batch")
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    quiet = getattr(model, "no_sync", None)
    total = 0.0
    for i, (x, y) in enumerate(batches):
        last = i == k - 1
        ctx = quiet() if (quiet is not None and not last) else contextlib.nullcontext()
        with ctx:
            loss = loss_fn(model(x), y)
            (loss / k).backward()
        total += float(loss.detach())
    optimizer.step()
    return total / k


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer,
                    step: int) -> dict[str, Any] | None:
    mine = torch.get_rng_state()
    if _distributed() and dist.get_world_size() > 1:
        states = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(states, mine)
        rank = dist.get_rank()
    else:
        states, rank = [mine], 0
    if rank != 0:
        return None
    return {"model": _inner(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": int(step),
            "rng": [s.clone() for s in states]}


def load_checkpoint(checkpoint: dict[str, Any], model: nn.Module,
                    optimizer: torch.optim.Optimizer) -> int:
    rank = dist.get_rank() if _distributed() else 0
    _inner(model).load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"][rank].clone())
    return int(checkpoint["step"])
