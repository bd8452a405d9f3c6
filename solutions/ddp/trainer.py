"""Reference trainer pieces: AdamW groups, warm-up + cosine, accumulation, checkpoints.

A worked example of README §7. The recipe is the one GPT-style training uses (Loshchilov &
Hutter, "Decoupled Weight Decay Regularization", ICLR 2019, for AdamW; Loshchilov & Hutter,
"SGDR", ICLR 2017, for the cosine schedule; linear warm-up from Goyal et al., "Accurate, Large
Minibatch SGD", 2017). The only communication is `save_checkpoint`'s all-gather of RNG states.
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


def _rank_and_size() -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def _unwrap(model: nn.Module) -> nn.Module:
    """The wrapped module of a DistributedDataParallel, else the model itself."""
    inner = model.module if hasattr(model, "module") else None
    return inner if isinstance(inner, nn.Module) else model


def make_optimizer(model: nn.Module, lr: float, weight_decay: float,
                   betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8) -> torch.optim.AdamW:
    # Decay shrinks weights towards zero; that regularises matrices, but a bias or a norm's
    # gain has no "size" to regularise, and decaying a norm gain fights the normalisation.
    # `model.parameters()` already yields each shared tensor once.
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def get_lr(step: int, max_lr: float, min_lr: float, warmup_steps: int,
           total_steps: int) -> float:
    if not 0 <= warmup_steps < total_steps or step < 0:
        raise ValueError(f"get_lr needs 0 <= warmup_steps < total_steps and step >= 0; got "
                         f"step={step}, warmup_steps={warmup_steps}, total_steps={total_steps}")
    # Warm-up: Adam's second moment is a poor estimate for the first steps; a small lr keeps
    # the early, badly scaled updates small. Step 0 uses 1/warmup of the peak, not zero.
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step > total_steps:
        return min_lr
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (max_lr - min_lr)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], loss_fn: LossFn,
               lr: float) -> float:
    k = len(micro_batches)
    if k < 1:
        raise ValueError("train_step needs at least one micro-batch")
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        # Only the last backward communicates; the others just add into .grad locally.
        quiet = model.no_sync() if (i < k - 1 and hasattr(model, "no_sync")) \
            else contextlib.nullcontext()
        with quiet:
            loss = loss_fn(model(x), y)
            # Dividing by k makes the accumulated gradient the mean over all k micro-batches.
            (loss / k).backward()
        total += float(loss.detach())
    optimizer.step()
    return total / k


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer,
                    step: int) -> dict[str, Any] | None:
    rank, size = _rank_and_size()
    # Each rank draws its own dropout masks: its generator state is part of the run's state.
    mine = torch.get_rng_state()
    if size > 1:
        states = [torch.empty_like(mine) for _ in range(size)]
        dist.all_gather(states, mine)
    else:
        states = [mine]
    if rank != 0:
        return None
    return {"model": _unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
            "step": int(step), "rng": states}


def load_checkpoint(checkpoint: dict[str, Any], model: nn.Module,
                    optimizer: torch.optim.Optimizer) -> int:
    rank, _ = _rank_and_size()
    _unwrap(model).load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"][rank])
    return int(checkpoint["step"])
