"""What travels to the ranks of the fsdp hidden suite: the models and the Zero3 training loop.

Both sides build the models from the same seed (the parent's references in `_ref` import them
from here), so the replicas and the reference start identical. The ZeRO-3 model's leaf layers
probe the memory alive in their forward and check in backward that their unit was gathered
again (`assignments/fsdp/_provided_checks.py`, which the public test uses too). The in-rank
launches of Part 2 (mixed precision, checkpoints) are in `_ranks_checkpoint`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from assignments.fsdp._provided_checks import ProbedBlock, ProbeLinear, live_storages
from harness.cases import run_cases
from harness.launcher import preload

# torch.optim imports torch._dynamo on first use, FSDP2 and DCP take a second more per rank:
# the forkserver imports them once.
preload("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint",
        "torch.distributed.checkpoint.state_dict", "torch.distributed.tensor")

# -- Part 1: the ZeRO-3 model --------------------------------------------------------------
D = 45  # a unit: fc.weight 45x45, fc.bias 45, scale 1 = 2071 elements: padding for N = 2, 4
BLOCKS = 4
UNIT_NUMEL = D * D + D + 1
Z3_CONFIGS = {
    # name: reshard_after_forward, optimizer, hyperparameters
    "reshard": (True, "sgd", {"lr": 0.05, "momentum": 0.9}),
    "keep": (False, "adamw", {"lr": 1e-2, "weight_decay": 0.1}),
}
LATER = " steps 2+"  # the case of a configuration's later steps: "<name> steps 2+"


def live_bytes(threshold: int, before: dict[int, int]) -> int:
    """Bytes of the large live storages that were not alive at `before` (the suite's own)."""
    return sum(n for ptr, n in live_storages(threshold).items() if ptr not in before)


class Z3Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([ProbedBlock(D) for _ in range(BLOCKS)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def build_z3(seed: int) -> Z3Net:
    torch.manual_seed(seed)
    return Z3Net().to(torch.float64)


def make_optimizer(kind: str, params: Any, hyper: dict) -> torch.optim.Optimizer:
    cls = torch.optim.SGD if kind == "sgd" else torch.optim.AdamW
    return cls(params, **hyper)


def rank_zero3(ctx: Any, seed: int, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Both Zero3 configurations, each as two cases in their own error scopes: "<name>" (the
    construction and step 1, with its memory probes and gradients) and "<name> steps 2+" (the
    later steps and the gathered state), so that a crash in a later step keeps step 1's
    evidence. Marks name every phase."""
    zero3 = ctx.impl_module("fsdp", "zero3")
    threshold = int(0.6 * UNIT_NUMEL * 8)
    state: dict[str, Any] = {}

    def step(name: str, s: int) -> None:
        wrapped, opt = state[name]
        ctx.mark(f"{name} step{s} forward")
        loss = ((wrapped(x[s]) - y[s]) ** 2).mean()
        ctx.mark(f"{name} step{s} backward")
        loss.backward()
        ProbeLinear.probe = None
        if s == 0:
            out = state[f"{name} out"]
            out["after_backward"] = live_bytes(threshold, state[f"{name} before"])
            out["grads"] = [None if p.grad is None else p.grad.detach().clone()
                            for p in wrapped.shards]
        ctx.mark(f"{name} step{s} optimizer")
        opt.step()
        opt.zero_grad()

    def first(name: str) -> dict:
        reshard, kind, hyper = Z3_CONFIGS[name]
        before = live_storages(threshold)  # e.g. what an earlier case returned
        model = build_z3(seed)
        wrapped = zero3.Zero3(model, list(model.blocks), reshard_after_forward=reshard)
        shards = list(wrapped.shards)
        param_ids = [id(p) for p in wrapped.parameters()]
        opt = make_optimizer(kind, wrapped.parameters(), hyper)
        probes: list[int] = []
        out: dict[str, Any] = {"param_is_shard": [id(s) for s in shards] == param_ids,
                               "shard_numel": [s.numel() for s in shards], "probes": probes}
        state[name], state[f"{name} out"], state[f"{name} before"] = (wrapped, opt), out, before
        ProbeLinear.probe = lambda: probes.append(live_bytes(threshold, before))
        try:
            step(name, 0)
        finally:
            ProbeLinear.probe = None
        return out

    def later(name: str) -> dict:
        if name not in state:
            raise RuntimeError(f"not run: Zero3 ({name}) failed in its construction")
        wrapped, _ = state[name]
        for s in range(1, x.shape[0]):
            step(name, s)
        ctx.mark(f"{name} gather")
        out = {"shards": [p.detach().clone() for p in wrapped.shards],
               "full": wrapped.full_state_dict()}
        ctx.mark(f"{name} done")
        return out

    cases: list[tuple[str, Any]] = []
    for name in Z3_CONFIGS:
        cases += [(name, lambda name=name: first(name)),
                  (name + LATER, lambda name=name: later(name))]
    return run_cases(ctx, cases)


# -- Part 2: the FSDP2 model ---------------------------------------------------------------
WIDTH, IN, OUT = 16, 8, 4
F2_BLOCKS = 3


class F2Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class F2Net(nn.Module):
    """embed (root) -> 3 residual blocks -> head (root): 4 units when wrapped per block."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(IN, WIDTH)
        self.blocks = nn.ModuleList([F2Block() for _ in range(F2_BLOCKS)])
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def build_f2(seed: int, dtype: torch.dtype = torch.float32) -> F2Net:
    torch.manual_seed(seed)
    return F2Net().to(dtype)
