"""ZeRO-3 by hand: the reference solution, written to be read as a worked example.

The design is stage 3 of ZeRO (Rajbhandari et al., SC'20, "P_os+g+p") as PyTorch's first FSDP
implemented it (Zhao et al., VLDB'23): every unit of the wrapping policy owns one flat
parameter; a rank keeps 1/N of it; the full flat parameter exists only while the unit computes.

Three ideas carry the whole file:
  1. One flat buffer per unit. All of a unit's parameters are views into it, so one
     all-gather materialises them all and one reduce-scatter shards all their gradients.
  2. Free by shrinking the storage, not by dropping references. Autograd saved the views
     for backward; `untyped_storage().resize_(0)` gives the memory back while those saved
     tensors stay valid objects, and `resize_(nbytes)` + all-gather refills the same storage
     before backward reads them.
  3. Hooks at the four edges of a unit: before forward (gather), after forward (free),
     before backward (re-gather: a hook on the unit's output gradient) and after backward
     (reduce-scatter: a hook on the flat leaf once its gradient is complete).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def flatten_pad(tensors: Sequence[torch.Tensor], world_size: int) -> torch.Tensor:
    """One unit's flat layout: the tensors flattened, concatenated, zero-padded to N * S."""
    if world_size < 1:
        raise ValueError(f"flatten_pad: world_size must be >= 1, got {world_size}")
    tensors = list(tensors)
    if not tensors:
        return torch.zeros(0)
    first = tensors[0]
    for t in tensors[1:]:
        if t.dtype != first.dtype:
            raise ValueError(f"flatten_pad: tensors of different dtypes {first.dtype} and "
                             f"{t.dtype}")
        if t.device != first.device:
            raise ValueError(f"flatten_pad: tensors on different devices {first.device} and "
                             f"{t.device}")
    numel = sum(t.numel() for t in tensors)
    shard = -(-numel // world_size)
    # A fresh zero buffer: the padding is zero by construction, and nothing aliases inputs.
    flat = torch.zeros(world_size * shard, dtype=first.dtype, device=first.device)
    offset = 0
    for t in tensors:
        flat[offset:offset + t.numel()].copy_(t.detach().reshape(-1))
        offset += t.numel()
    return flat


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    """The submodule that holds parameter `name` ("a.b.weight") and the attribute name."""
    *path, attr = name.split(".")
    owner = module
    for part in path:
        owner = owner.get_submodule(part)
    return owner, attr


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors_in(item)]
    return []


class _Unit:
    """One unit of the wrapping policy: its shard, its layout, its hooks."""

    def __init__(self, unit: nn.Module, group: dist.ProcessGroup | None,
                 reshard_after_forward: bool) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.reshard_after_forward = reshard_after_forward
        named = list(unit.named_parameters())
        flat = flatten_pad([p.detach() for _, p in named], self.world)
        self.shard_numel = flat.numel() // self.world
        begin = self.rank * self.shard_numel
        self.shard = nn.Parameter(flat[begin:begin + self.shard_numel].clone())
        # Where each parameter lives in the flat buffer; the originals leave the module,
        # so only the shard remains a Parameter (and the optimizer sees only shards).
        self.layout: list[tuple[nn.Module, str, torch.Size, int, int]] = []
        offset = 0
        for name, p in named:
            owner, attr = _owner(unit, name)
            del owner._parameters[attr]
            self.layout.append((owner, attr, p.shape, offset, p.numel()))
            offset += p.numel()
        self.names = [name for name, _ in named]
        self.full: torch.Tensor | None = None  # the flat leaf of the current step
        self.gathered = False
        unit.register_forward_pre_hook(self._pre_forward)
        unit.register_forward_hook(self._post_forward)

    # -- the collectives, gathered here so they can be counted ------------------------------
    def _all_gather_into(self, out: torch.Tensor) -> None:
        dist.all_gather_into_tensor(out, self.shard.detach(), group=self.group)

    def _reduce_scatter_mean(self, flat_grad: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(self.shard)
        dist.reduce_scatter_tensor(out, flat_grad.contiguous(), group=self.group)
        # The loss is each rank's local mean: the global-batch gradient is the mean over ranks.
        return out.div_(self.world)

    # -- materialise and free ------------------------------------------------------------
    def _gather(self) -> None:
        if self.gathered:
            return
        assert self.full is not None
        nbytes = self.full.numel() * self.full.element_size()
        self.full.untyped_storage().resize_(nbytes)
        # `.data`: refill the storage without autograd seeing an in-place write on the leaf.
        with torch.no_grad():
            self._all_gather_into(self.full.data)
        self.gathered = True

    def _free(self) -> None:
        if self.full is not None:
            self.full.untyped_storage().resize_(0)
        self.gathered = False

    def _point_views(self) -> None:
        """Each parameter name of the unit becomes a view of the flat leaf (autograd-tracked)."""
        assert self.full is not None
        for owner, attr, shape, offset, numel in self.layout:
            # A non-persistent buffer: `owner.weight` finds it, `parameters()` does not.
            owner.register_buffer(attr, self.full[offset:offset + numel].view(shape),
                                  persistent=False)

    # -- the four hooks -------------------------------------------------------------------
    def _pre_forward(self, _module: nn.Module, _args: Any) -> None:
        # A fresh flat leaf each step: its gradient hook fires once, in this step's backward.
        self.full = torch.empty(self.world * self.shard_numel, dtype=self.shard.dtype,
                                device=self.shard.device)
        self.full.untyped_storage().resize_(0)
        self.full.requires_grad_(True)
        self.full.register_post_accumulate_grad_hook(self._post_backward)
        self.gathered = False
        self._gather()
        self._point_views()

    def _post_forward(self, _module: nn.Module, _args: Any, output: Any) -> Any:
        for t in _tensors_in(output):
            if t.requires_grad:
                t.register_hook(self._pre_backward)
        if self.reshard_after_forward:
            self._free()
        return output

    def _pre_backward(self, grad: torch.Tensor) -> torch.Tensor:
        self._gather()  # a no-op without resharding, or for the 2nd output of the unit
        return grad

    def _post_backward(self, full: torch.Tensor) -> None:
        assert full.grad is not None
        # Views never touch the padding, so its gradient is exactly zero.
        shard_grad = self._reduce_scatter_mean(full.grad)
        if self.shard.grad is None:
            self.shard.grad = shard_grad
        else:
            self.shard.grad.add_(shard_grad)
        full.grad = None
        self._free()


class Zero3(nn.Module):
    """ZeRO stage 3 (FSDP's FULL_SHARD) around `module`, one flat shard per unit."""

    def __init__(self, module: nn.Module, units: Sequence[nn.Module], *,
                 reshard_after_forward: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        units = list(units)
        _check_units(module, units)
        self.module = module
        self.group = group
        self._units = [_Unit(u, group, reshard_after_forward) for u in units]
        self._shards = nn.ParameterList([u.shard for u in self._units])
        self._prefixes = [_prefix_of(module, u) for u in units]

    @property
    def shards(self) -> list[nn.Parameter]:
        return list(self._shards)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for unit, prefix in zip(self._units, self._prefixes):
            flat = torch.empty(unit.world * unit.shard_numel, dtype=unit.shard.dtype,
                               device=unit.shard.device)
            with torch.no_grad():
                unit._all_gather_into(flat)
            for name, (_, _, shape, offset, numel) in zip(unit.names, unit.layout):
                out[prefix + name] = flat[offset:offset + numel].view(shape).clone()
        return out


def _prefix_of(module: nn.Module, unit: nn.Module) -> str:
    for name, sub in module.named_modules():
        if sub is unit:
            return name + "." if name else ""
    raise ValueError("unit is not a submodule of module")


def _check_units(module: nn.Module, units: list[nn.Module]) -> None:
    """The wrapping policy must cover every parameter exactly once."""
    inside = {id(m) for m in module.modules()}
    for u in units:
        if id(u) not in inside:
            raise ValueError(f"Zero3: unit {type(u).__name__} is not a submodule of module")
    for i, a in enumerate(units):
        for b in units[i + 1:]:
            if a is b or any(m is b for m in a.modules()) or any(m is a for m in b.modules()):
                raise ValueError(f"Zero3: units {type(a).__name__} and {type(b).__name__} "
                                 f"overlap (one contains the other)")
    covered = {id(p) for u in units for p in u.parameters()}
    for name, p in module.named_parameters():
        if id(p) not in covered:
            raise ValueError(f"Zero3: parameter {name!r} is in no unit")
