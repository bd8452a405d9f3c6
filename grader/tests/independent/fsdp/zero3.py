"""An independent ZeRO-3 (not the reference), written from the stub's docstrings and README §2-§5.

Design chosen here: each unit owns one persistent leaf tensor `full` (N*S elements,
`requires_grad=True`) whose storage is grown and shrunk in place. Before a unit runs, its
parameter names are re-registered as non-persistent buffers that are fresh autograd views of
`full`, so every parameter gradient lands, already laid out flat with a zero padding, in
`full.grad`; a post-accumulate-grad hook on `full` then reduce-scatters it. The re-gather for
backward is a hook on the gradient of the unit's outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def flatten_pad(tensors: Sequence[torch.Tensor], world_size: int) -> torch.Tensor:
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    items = list(tensors)
    if not items:
        return torch.zeros(0, dtype=torch.float32)
    dtype, device = items[0].dtype, items[0].device
    for t in items[1:]:
        if t.dtype != dtype:
            raise ValueError(f"tensors of different dtypes: {dtype} and {t.dtype}")
        if t.device != device:
            raise ValueError(f"tensors on different devices: {device} and {t.device}")
    total = sum(t.numel() for t in items)
    per_rank = -(-total // world_size)
    out = torch.zeros(per_rank * world_size, dtype=dtype, device=device)
    at = 0
    with torch.no_grad():
        for t in items:
            n = t.numel()
            out[at:at + n].copy_(t.detach().reshape(-1))
            at += n
    return out


class _Unit:
    """Everything Zero3 knows about one unit."""

    def __init__(self, module: nn.Module, index: int) -> None:
        self.module = module
        self.index = index
        # one entry per distinct parameter: (full name, shape, numel, offset, aliases) where
        # aliases are the (owner module, attribute) pairs under which it is registered
        self.slots: list[tuple[str, torch.Size, int, int, list[tuple[nn.Module, str]]]] = []
        self.numel = 0
        self.per_rank = 0
        self.full: torch.Tensor | None = None
        self.shard: nn.Parameter | None = None
        self.present = False
        self.regather_armed = False

    @property
    def nbytes(self) -> int:
        assert self.full is not None
        return self.full.numel() * self.full.element_size()


class Zero3(nn.Module):
    """ZeRO stage 3 around `module`, one flat shard per unit (README §5)."""

    def __init__(self, module: nn.Module, units: Sequence[nn.Module], *,
                 reshard_after_forward: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        units = list(units)
        self._check_units(module, units)
        self.module = module
        self._group = group
        self._world = dist.get_world_size(group)
        self._rank = dist.get_rank(group)
        self._reshard = bool(reshard_after_forward)

        original_names = {id(p): n for n, p in module.named_parameters()}
        self._order = [n for n, _ in module.named_parameters()]
        self._units: list[_Unit] = []
        shard_params = []
        for index, unit_module in enumerate(units):
            unit = self._lay_out(unit_module, index, original_names)
            self._units.append(unit)
            shard_params.append(unit.shard)
        self._shards = nn.ParameterList(shard_params)

        for unit in self._units:
            unit.module.register_forward_pre_hook(self._make_pre_forward(unit))
            unit.module.register_forward_hook(self._make_post_forward(unit))
            unit.full.register_post_accumulate_grad_hook(self._make_grad_ready(unit))

    # -- construction ------------------------------------------------------------------------------
    @staticmethod
    def _check_units(module: nn.Module, units: list[nn.Module]) -> None:
        inside = {id(m) for m in module.modules()}
        for u in units:
            if id(u) not in inside:
                raise ValueError(f"unit {type(u).__name__} is not a submodule of the module")
        for i, a in enumerate(units):
            for b in units[i + 1:]:
                if a is b:
                    raise ValueError(f"unit {type(a).__name__} is given twice")
                if any(m is b for m in a.modules()) or any(m is a for m in b.modules()):
                    raise ValueError(f"units {type(a).__name__} and {type(b).__name__} are "
                                     "nested: one contains the other")
        covered: set[int] = set()
        for u in units:
            covered.update(id(p) for p in u.parameters())
        for name, p in module.named_parameters():
            if id(p) not in covered:
                raise ValueError(f"parameter {name!r} lies in no unit")

    def _lay_out(self, unit_module: nn.Module, index: int,
                 original_names: dict[int, str]) -> _Unit:
        unit = _Unit(unit_module, index)
        aliases: dict[int, list[tuple[nn.Module, str]]] = {}
        for qual, p in unit_module.named_parameters(remove_duplicate=False):
            owner_path, _, attr = qual.rpartition(".")
            owner = unit_module.get_submodule(owner_path) if owner_path else unit_module
            aliases.setdefault(id(p), []).append((owner, attr))
        params = list(unit_module.parameters())
        offset = 0
        for p in params:
            unit.slots.append((original_names[id(p)], p.shape, p.numel(), offset, aliases[id(p)]))
            offset += p.numel()
        unit.numel = offset
        full = flatten_pad([p.detach() for p in params], self._world)
        unit.per_rank = full.numel() // self._world
        lo = self._rank * unit.per_rank
        unit.shard = nn.Parameter(full[lo:lo + unit.per_rank].clone())
        full.requires_grad_(True)
        unit.full = full
        # the original parameters leave the module; their names become views of `full`
        with torch.no_grad():
            self._bind_views(unit, track=False)
        self._release(unit)
        return unit

    # -- gather / free -----------------------------------------------------------------------------
    def _bind_views(self, unit: _Unit, track: bool) -> None:
        base = unit.full if track else unit.full.detach()
        for _, shape, numel, offset, owners in unit.slots:
            view = base[offset:offset + numel].view(shape)
            for owner, attr in owners:
                if attr in owner._parameters:
                    del owner._parameters[attr]
                owner.register_buffer(attr, view, persistent=False)

    def _gather(self, unit: _Unit) -> None:
        storage = unit.full.untyped_storage()
        if storage.nbytes() < unit.nbytes:
            storage.resize_(unit.nbytes)
        dist.all_gather_into_tensor(unit.full.data, unit.shard.detach(), group=self._group)
        unit.present = True

    def _release(self, unit: _Unit) -> None:
        unit.full.grad = None
        unit.full.untyped_storage().resize_(0)
        unit.present = False

    # -- hooks -------------------------------------------------------------------------------------
    def _make_pre_forward(self, unit: _Unit):
        def pre_forward(_module: nn.Module, _args: Any) -> None:
            self._gather(unit)
            self._bind_views(unit, track=torch.is_grad_enabled())
            unit.regather_armed = False

        return pre_forward

    def _make_post_forward(self, unit: _Unit):
        def before_backward(grad: torch.Tensor) -> None:
            if not unit.present:
                self._gather(unit)

        def post_forward(_module: nn.Module, _args: Any, output: Any) -> None:
            outs = output if isinstance(output, (tuple, list)) else (output,)
            differentiable = [t for t in outs
                              if isinstance(t, torch.Tensor) and t.requires_grad]
            for t in differentiable:
                t.register_hook(before_backward)
            if self._reshard or not differentiable:
                self._release(unit)

        return post_forward

    def _make_grad_ready(self, unit: _Unit):
        def grad_ready(full: torch.Tensor) -> None:
            flat = full.grad
            if unit.numel < flat.numel():
                flat[unit.numel:].zero_()
            mine = torch.empty(unit.per_rank, dtype=flat.dtype, device=flat.device)
            dist.reduce_scatter_tensor(mine, flat.contiguous(), group=self._group)
            mine.div_(self._world)
            if unit.shard.grad is None:
                unit.shard.grad = mine
            else:
                unit.shard.grad.add_(mine)
            self._release(unit)

        return grad_ready

    # -- public API --------------------------------------------------------------------------------
    @property
    def shards(self) -> list[nn.Parameter]:
        return list(self._shards)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        values: dict[str, torch.Tensor] = {}
        for unit in self._units:
            whole = torch.empty(unit.per_rank * self._world, dtype=unit.shard.dtype,
                                device=unit.shard.device)
            dist.all_gather_into_tensor(whole, unit.shard.detach(), group=self._group)
            for name, shape, numel, offset, _ in unit.slots:
                values[name] = whole[offset:offset + numel].view(shape).clone()
        return {name: values[name] for name in self._order}
