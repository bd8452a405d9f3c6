"""An independent zero2 optimizer, written from the stub's docstrings and README only.

Different from the reference where the contract allows: one inner parameter per param group
(the group's slice of this rank's shard, possibly empty), the gradient shard synchronised
lazily by whichever of `clip_grad_norm_` and `step` comes first, and consolidation through
`gather_object` of each rank's shard of every state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist


class Zero2Optimizer:
    def __init__(self, params: Iterable[Any],
                 optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
                 group: dist.ProcessGroup | None = None, **defaults: Any) -> None:
        items = list(params)
        groups = items if items and isinstance(items[0], dict) else [{"params": items}]
        self._group = group
        self._distributed = dist.is_available() and dist.is_initialized()
        self._world = dist.get_world_size(group) if self._distributed else 1
        self._rank = dist.get_rank(group) if self._distributed else 0
        self._user_groups: list[tuple[list[torch.Tensor], dict[str, Any]]] = []
        for g in groups:
            members = g["params"]
            members = [members] if isinstance(members, torch.Tensor) else list(members)
            self._user_groups.append((members, {k: v for k, v in g.items() if k != "params"}))
        trainable = [p for members, _ in self._user_groups for p in members if p.requires_grad]
        kinds = {(p.dtype, p.device) for p in trainable}
        if len(kinds) > 1:
            raise ValueError("trainable parameters must share one dtype and device, got "
                             + ", ".join(sorted(f"{d} on {v}" for d, v in kinds)))
        self._params = trainable
        self._dtype = trainable[0].dtype if trainable else torch.float32
        self._device = trainable[0].device if trainable else torch.device("cpu")
        self._master_dtype = torch.float64 if self._dtype == torch.float64 else torch.float32
        self._offsets: list[int] = []
        total = 0
        for p in trainable:
            self._offsets.append(total)
            total += p.numel()
        self._total = total
        self._shard = math.ceil(total / self._world) if total else 0
        start, end = self.shard_bounds
        self._pieces: list[torch.Tensor] = []  # one per param group: its slice of the shard
        self._piece_ranges: list[tuple[int, int]] = []  # flat range of each piece
        inner_groups = []
        cursor = 0
        flat = self._flat_params()
        for members, hyper in self._user_groups:
            size = sum(p.numel() for p in members if p.requires_grad)
            lo, hi = max(cursor, start), min(cursor + size, end)
            hi = max(lo, hi)
            piece = flat[lo:hi].to(self._master_dtype).clone().requires_grad_(True)
            self._pieces.append(piece)
            self._piece_ranges.append((lo, hi))
            inner_groups.append({"params": [piece], **hyper})
            cursor += size
        self._inner = optimizer_class(inner_groups, **defaults)
        self._grad_shard: torch.Tensor | None = None

    # -- layout -------------------------------------------------------------------------------
    @property
    def shard_bounds(self) -> tuple[int, int]:
        return self._rank * self._shard, (self._rank + 1) * self._shard

    @property
    def inner(self) -> torch.optim.Optimizer:
        return self._inner

    def _flat_params(self) -> torch.Tensor:
        flat = torch.zeros(self._world * self._shard, dtype=self._dtype, device=self._device)
        for p, off in zip(self._params, self._offsets):
            flat[off:off + p.numel()] = p.detach().reshape(-1)
        return flat

    # -- communication ------------------------------------------------------------------------
    def _anyone(self, mine: bool) -> bool:
        if self._world == 1:
            return mine
        flag = torch.tensor([1.0 if mine else 0.0], device=self._device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item() > 0)

    def _sync_gradients(self) -> bool:
        """Reduce-scatter the averaged gradient into this rank's shard, adding it to what the
        shard holds (zeros after zero_grad(set_to_none=False))."""
        if not self._anyone(any(p.grad is not None for p in self._params)):
            return self._grad_shard is not None
        flat = torch.zeros(self._world * self._shard, dtype=self._dtype, device=self._device)
        for p, off in zip(self._params, self._offsets):
            if p.grad is not None:
                flat[off:off + p.numel()] = p.grad.reshape(-1)
            p.grad = None
        if self._world == 1:
            mine = flat
        else:
            mine = torch.empty(self._shard, dtype=self._dtype, device=self._device)
            dist.reduce_scatter_tensor(mine, flat, group=self._group)
        shard = mine.to(self._master_dtype) / self._world
        self._grad_shard = shard if self._grad_shard is None else self._grad_shard + shard
        return True

    # -- training -------------------------------------------------------------------------------
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        synced = self._sync_gradients()
        local = (self._grad_shard.double().pow(2).sum() if synced
                 else torch.zeros((), dtype=torch.float64, device=self._device))
        squared = local.reshape(1).to(self._master_dtype)
        if self._world > 1:
            dist.all_reduce(squared, group=self._group)
        norm = squared.reshape(()).sqrt()
        if synced:
            self._grad_shard.mul_(min(1.0, max_norm / (float(norm) + 1e-6)))
        return norm.to(self._dtype)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        result = None
        if closure is not None:
            with torch.enable_grad():
                result = closure()
        if not self._sync_gradients():
            return result
        start = self.shard_bounds[0]
        for piece, (lo, hi) in zip(self._pieces, self._piece_ranges):
            piece.grad = self._grad_shard[lo - start:hi - start]
        self._inner.step()
        updated = torch.zeros(self._shard, dtype=self._dtype, device=self._device)
        for piece, (lo, hi) in zip(self._pieces, self._piece_ranges):
            updated[lo - start:hi - start] = piece.detach().to(self._dtype)
        if self._world == 1:
            full = updated
        else:
            full = torch.empty(self._world * self._shard, dtype=self._dtype,
                               device=self._device)
            dist.all_gather_into_tensor(full, updated, group=self._group)
        with torch.no_grad():
            for p, off in zip(self._params, self._offsets):
                p.copy_(full[off:off + p.numel()].view_as(p))
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self._params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        for piece in self._pieces:
            piece.grad = None
        if set_to_none:
            self._grad_shard = None
        elif self._grad_shard is not None:
            self._grad_shard.zero_()

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"inner": self._inner.state_dict(), "pieces": [p.detach() for p in self._pieces],
                "rank": self._rank, "world": self._world}

    def load_state_dict(self, state: dict) -> None:
        self._inner.load_state_dict(state["inner"])
        with torch.no_grad():
            for piece, saved in zip(self._pieces, state["pieces"]):
                piece.copy_(saved)

    def consolidated_state_dict(self, dst: int = 0) -> dict | None:
        start = self.shard_bounds[0]
        mine: dict[str, Any] = {"per_element": {}, "scalars": []}
        for g, piece in enumerate(self._pieces):
            lo, hi = self._piece_ranges[g]
            scalars = {}
            for name, value in self._inner.state.get(piece, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() == 1 \
                        and value.shape == piece.shape:
                    shard = mine["per_element"].setdefault(
                        name, torch.zeros(self._shard, dtype=self._master_dtype))
                    shard[lo - start:hi - start] = value.detach().cpu()
                else:
                    scalars[name] = value.detach().cpu().clone() \
                        if isinstance(value, torch.Tensor) else value
            mine["scalars"].append(scalars)
        if self._world == 1:
            everyone = [mine]
        else:
            everyone = [None] * self._world if self._rank == dst else None
            target = dst if self._group is None else dist.get_global_rank(self._group, dst)
            dist.gather_object(mine, everyone, dst=target, group=self._group)
        if self._rank != dst:
            return None
        names = sorted({n for o in everyone for n in o["per_element"]})
        flat = {n: torch.cat([o["per_element"].get(n, torch.zeros(self._shard,
                                                                    dtype=self._master_dtype))
                              for o in everyone]) for n in names}
        state: dict[int, dict[str, Any]] = {}
        param_groups = []
        index = 0
        trainable_seen = 0
        for g, (members, _) in enumerate(self._user_groups):
            indices = []
            for p in members:
                indices.append(index)
                if p.requires_grad:
                    off = self._offsets[trainable_seen]
                    trainable_seen += 1
                    owner = min(off // self._shard, self._world - 1) if self._shard else 0
                    scalars = everyone[owner]["scalars"][g]
                    stepped = bool(scalars) or any(n in everyone[owner]["per_element"]
                                                   for n in names)
                    if stepped and p.numel():
                        entry = {n: v.clone() if isinstance(v, torch.Tensor) else v
                                 for n, v in scalars.items()}
                        for n in names:
                            entry[n] = flat[n][off:off + p.numel()].view_as(p).to(
                                dtype=p.dtype, device=p.device).clone()
                        state[index] = entry
                index += 1
            hyper = {k: v for k, v in self._inner.param_groups[g].items() if k != "params"}
            param_groups.append({**hyper, "params": indices})
        return {"state": state, "param_groups": param_groups}
