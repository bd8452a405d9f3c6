"""References of the fsdp hidden suite, computed in the parent: single-process float64 training
with plain torch on the global batch (the mean loss over it), from the models of `_ranks`, and
the ZeRO-3 unit layout built from named parameters.
"""

from __future__ import annotations

import torch

from grader.suites.fsdp._ranks import Z3_CONFIGS, build_f2, build_z3, make_optimizer


def z3_reference(name: str, seed: int, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Single-process training on the global batch: the gradients of step 0 ("grads") and the
    parameters after each step ("history")."""
    _, kind, hyper = Z3_CONFIGS[name]
    model = build_z3(seed)
    opt = make_optimizer(kind, model.parameters(), hyper)
    history: list[dict[str, torch.Tensor]] = []
    grads: dict[str, torch.Tensor] = {}
    for s in range(x.shape[0]):
        opt.zero_grad()
        ((model(x[s]) - y[s]) ** 2).mean().backward()
        if s == 0:
            grads = {k: _grad(v) for k, v in model.named_parameters()}
        opt.step()
        history.append({k: v.detach().clone() for k, v in model.named_parameters()})
    return {"grads": grads, "history": history}


def _grad(param: torch.Tensor) -> torch.Tensor:
    """A copy of `param.grad`, which every parameter of the reference models has after backward."""
    if param.grad is None:
        raise RuntimeError("the reference model has a parameter without a gradient")
    return param.grad.detach().clone()


def flat_of(params: dict[str, torch.Tensor], world_size: int, block: int) -> torch.Tensor:
    """The unit layout of block `block`, built in the parent from named parameters."""
    # ProbedBlock.named_parameters(): its own `scale` first, then the submodule's.
    names = [f"blocks.{block}.scale", f"blocks.{block}.fc.weight", f"blocks.{block}.fc.bias"]
    flat = torch.cat([params[n].reshape(-1) for n in names])
    shard = -(-flat.numel() // world_size)
    return torch.cat([flat, flat.new_zeros(world_size * shard - flat.numel())])


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
