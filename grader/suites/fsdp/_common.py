"""Shared pieces of the fsdp hidden suite: models, data, references, rank functions, launches.

Parent side: seed-built models and their single-process float64 references (plain torch, the
mean loss over the global batch). Rank side: the training loops that drive the code under test
and the probes that look at it. Both sides build models from the same seed, so the replicas
and the reference start identical.

Launches (each shared through `MEMO` by every module that reads it):
  "zero3"    4 ranks, sidecar: Zero3 with resharding (SGD + momentum) and without (AdamW),
             memory probes in every leaf forward, a mark per phase for the wire log;
  "basics"   1 rank: flatten_pad values and the ValueErrors of flatten_pad and Zero3;
  "fsdp2"    4 ranks, sidecar: one training step per strategy, mesh errors;
  "ckpt4"    4 ranks, in-rank: mixed precision cases, then AdamW training with a DCP save after
             2 steps and 2 more steps (the sidecar does not carry DCP's gathers, nor bf16 sums);
  "ckpt2"    2 ranks, in-rank: load "ckpt4"'s checkpoint, compare, train the same 2 steps.
"""

from __future__ import annotations

import gc
from typing import Any

import torch
from torch import nn

from grader.seeds import seeded_generator, shifted
from harness import Forbid
from harness.cases import Memo, case_value, launch_cases
from harness.launcher import preload

# torch.optim imports torch._dynamo on first use, FSDP2 and DCP take a second more per rank:
# the forkserver imports them once.
preload("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint",
        "torch.distributed.checkpoint.state_dict", "torch.distributed.tensor")
LAUNCH_TIMEOUT = 180.0
# No shorter limit after a hang: a deadlock is found by the stall watch in seconds, and a
# shortened wall clock could end a correct launch on a loaded machine.
MEMO = Memo()

# -- Part 1: the ZeRO-3 model --------------------------------------------------------------
D = 45  # a unit: fc.weight 45x45, fc.bias 45, scale 1 = 2071 elements: padding for N = 2, 4
BLOCKS = 4
UNIT_NUMEL = D * D + D + 1
Z3_WORLD = 4
Z3_BATCH = 3  # rows per rank
Z3_STEPS = 3
Z3_SEED = 11
Z3_CONFIGS = {
    # name: reshard_after_forward, optimizer, hyperparameters
    "reshard": (True, "sgd", {"lr": 0.05, "momentum": 0.9}),
    "keep": (False, "adamw", {"lr": 1e-2, "weight_decay": 0.1}),
}
Z3_ALLOWED = frozenset({"all_gather", "all_gather_into_tensor", "all_gather_single",
                        "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"})


def z3_forbid() -> Forbid:
    return Forbid(allow_only=Z3_ALLOWED,
                  rule="ZeRO-3 communicates with all-gathers and reduce-scatters only")


def live_storages(threshold: int) -> dict[int, int]:
    """{data_ptr: bytes} of the distinct live storages (of tensors the garbage collector
    tracks, i.e. reachable from Python) of at least `threshold` bytes."""
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            try:
                storage = obj.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            if storage.nbytes() >= threshold:
                seen[storage.data_ptr()] = storage.nbytes()
    return seen


def live_bytes(threshold: int, before: dict[int, int]) -> int:
    """Bytes of the large live storages that were not alive at `before` (the suite's own)."""
    return sum(n for ptr, n in live_storages(threshold).items() if ptr not in before)


class CheckedLinear(torch.autograd.Function):
    """F.linear whose backward first checks that the weight it saved still has its memory: a
    unit freed after forward and not gathered again would be read from an empty storage."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        needed = (weight.storage_offset() + weight.numel()) * weight.element_size()
        if weight.untyped_storage().nbytes() < needed:
            raise RuntimeError("a unit's parameters are freed in backward (empty storage): "
                               "re-gather the unit before its backward")
        rows, grad_rows = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1])
        return grad @ weight, grad_rows.t() @ rows, grad_rows.sum(0)


class CheckedScale(torch.autograd.Function):
    """h * scale, with the same check in backward for the one-element `scale` parameter."""

    @staticmethod
    def forward(ctx, h, scale):
        ctx.save_for_backward(h, scale)
        return h * scale

    @staticmethod
    def backward(ctx, grad):
        h, scale = ctx.saved_tensors
        needed = (scale.storage_offset() + scale.numel()) * scale.element_size()
        if scale.untyped_storage().nbytes() < needed:
            raise RuntimeError("a unit's parameters are freed in backward (empty storage): "
                               "re-gather the unit before its backward")
        return grad * scale, (grad * h).sum().reshape(scale.shape)

class ProbeLinear(nn.Linear):
    """nn.Linear whose forward first calls `ProbeLinear.probe` (None in the parent), and whose
    backward checks its weight is there (CheckedLinear)."""

    probe: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if ProbeLinear.probe is not None:
            ProbeLinear.probe()
        return CheckedLinear.apply(x, self.weight, self.bias)


class Z3Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = ProbeLinear(D, D)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + CheckedScale.apply(torch.tanh(self.fc(x)), self.scale)


class Z3Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Z3Block() for _ in range(BLOCKS)])

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


def z3_data(world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(Z3_SEED + 1)
    rows = world_size * Z3_BATCH
    x = torch.randn(Z3_STEPS, rows, D, generator=gen, dtype=torch.float64)
    y = torch.randn(Z3_STEPS, rows, D, generator=gen, dtype=torch.float64)
    return x, y


def per_rank(x: torch.Tensor, y: torch.Tensor, world_size: int) -> list[tuple]:
    b = x.shape[1] // world_size
    return [(x[:, r * b:(r + 1) * b].clone(), y[:, r * b:(r + 1) * b].clone())
            for r in range(world_size)]


def z3_reference(name: str, seed: int, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Single-process training on the global batch: the gradients of step 0 ("grads") and the
    parameters after each step ("history")."""
    _, kind, hyper = Z3_CONFIGS[name]
    model = build_z3(seed)
    opt = make_optimizer(kind, model.parameters(), hyper)
    history, grads = [], {}
    for s in range(x.shape[0]):
        opt.zero_grad()
        ((model(x[s]) - y[s]) ** 2).mean().backward()
        if s == 0:
            grads = {k: v.grad.detach().clone() for k, v in model.named_parameters()}
        opt.step()
        history.append({k: v.detach().clone() for k, v in model.named_parameters()})
    return {"grads": grads, "history": history}


LATER = " steps 2+"  # the case of a configuration's later steps: "<name> steps 2+"


def rank_zero3(ctx: Any, seed: int, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Both Zero3 configurations, each as two cases in their own error scopes: "<name>" (the
    construction and step 1, with its memory probes and gradients) and "<name> steps 2+" (the
    later steps and the gathered state), so that a crash in a later step keeps step 1's
    evidence. Marks name every phase."""
    from harness.cases import run_cases

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


def launch_zero3(launch: Any, impl: Any) -> Any:
    """The "zero3" launch; a case that hangs or ends the launch costs only itself
    (`harness.cases.launch_cases`)."""
    def make() -> Any:
        x, y = z3_data(Z3_WORLD)
        seed = shifted(Z3_SEED)
        names = [n for name in Z3_CONFIGS for n in (name, name + LATER)]
        result = launch_cases(lambda env: launch(
            rank_zero3, Z3_WORLD, args=(seed,), rank_args=per_rank(x, y, Z3_WORLD),
            forbid=z3_forbid(), transport="sidecar", timeout=LAUNCH_TIMEOUT, env=env), names)
        refs = {name: z3_reference(name, seed, x, y) for name in Z3_CONFIGS}
        return result, refs
    return MEMO.get(("zero3", impl), make)


def flat_of(params: dict[str, torch.Tensor], world_size: int, block: int) -> torch.Tensor:
    """The unit layout of block `block`, built in the parent from named parameters."""
    # Z3Block.named_parameters(): its own `scale` first, then the submodule's.
    names = [f"blocks.{block}.scale", f"blocks.{block}.fc.weight", f"blocks.{block}.fc.bias"]
    flat = torch.cat([params[n].reshape(-1) for n in names])
    shard = -(-flat.numel() // world_size)
    return torch.cat([flat, flat.new_zeros(world_size * shard - flat.numel())])


def z3_case(launch: Any, impl: Any, name: str, whole: bool = True
            ) -> tuple[Any, list[dict], dict]:
    """(launch result, the case's value per rank, the reference); raises the case's error (not
    implemented, a crash) in the test that reads it. `whole=False`: step 1's evidence only
    (construction, step-1 probes and gradients), which a crash in a later step keeps."""
    result, refs = launch_zero3(launch, impl)
    values = [dict(case_value(v[name], f"Zero3 ({name})", rank=r, world_size=Z3_WORLD))
              for r, v in enumerate(result.values)]
    if whole:
        for r, v in enumerate(result.values):
            values[r].update(case_value(v[name + LATER], f"Zero3 ({name}) in steps 2-{Z3_STEPS}",
                                        rank=r, world_size=Z3_WORLD))
    return result, values, refs[name]


def z3_steps(launch: Any, impl: Any, name: str) -> list[int]:
    """The steps of configuration `name` whose communication can be judged: every step, or
    step 1 alone (index 0) when a later step raised; step 1's error is raised."""
    z3_case(launch, impl, name, whole=False)
    try:
        z3_case(launch, impl, name)
    except AssertionError:
        return [0]
    return list(range(Z3_STEPS))


# -- Part 2: the FSDP2 model ---------------------------------------------------------------
WIDTH, IN, OUT = 16, 8, 4
F2_BLOCKS = 3
F2_SEED = 23


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


def f2_data(world_size: int, steps: int, batch: int, seed: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(seed)
    x = torch.randn(steps, world_size * batch, IN, generator=gen)
    y = torch.randn(steps, world_size * batch, OUT, generator=gen)
    return x, y


def f2_reference(seed: int, x: torch.Tensor, y: torch.Tensor, kind: str, hyper: dict,
                 steps: int) -> dict[str, torch.Tensor]:
    """float64 single-process training on the global batch; the weights after `steps`."""
    model = build_f2(seed, torch.float64)
    opt = make_optimizer(kind, model.parameters(), hyper)
    for s in range(steps):
        opt.zero_grad()
        ((model(x[s].double()) - y[s].double()) ** 2).mean().backward()
        opt.step()
    # state_dict() tensors are already detached: a copy of each is all that is needed
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}
