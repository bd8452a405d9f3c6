"""An independent fsdp2 (not the reference), written from the stub's docstrings and README §6-§7:
strategies as device meshes over `fully_shard`, a mixed-precision policy, DCP checkpoints.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
_RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "NO_SHARD": False, "HYBRID_SHARD": True}
_NAMES_2D = ("replicate", "shard")


def _mesh_shape(strategy: str, world_size: int, shard_size: int | None) -> tuple[int, ...]:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: choose one of {STRATEGIES}")
    if strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return (world_size,)
    if strategy == "NO_SHARD":
        return (world_size, 1)
    if shard_size is None or shard_size < 1 or world_size % shard_size != 0:
        raise ValueError(f"HYBRID_SHARD needs a shard_size >= 1 that divides the world size "
                         f"{world_size}, got {shard_size}")
    return (world_size // shard_size, shard_size)


def build_mesh(strategy: str, world_size: int, shard_size: int | None = None) -> DeviceMesh:
    shape = _mesh_shape(strategy, world_size, shard_size)
    if len(shape) == 1:
        return init_device_mesh("cpu", shape)
    return init_device_mesh("cpu", shape, mesh_dim_names=_NAMES_2D)


def shard_model(model: nn.Module, strategy: str = "FULL_SHARD", *,
                shard_size: int | None = None,
                param_dtype: torch.dtype | None = None,
                reduce_dtype: torch.dtype | None = None) -> nn.Module:
    if not hasattr(model, "blocks"):
        raise ValueError(f"{type(model).__name__} has no `blocks` to shard")
    world = dist.get_world_size()
    _mesh_shape(strategy, world, shard_size)  # validate before any collective
    options: dict = {"mesh": build_mesh(strategy, world, shard_size),
                     "reshard_after_forward": _RESHARD[strategy]}
    if param_dtype is not None or reduce_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype,
                                                    reduce_dtype=reduce_dtype)
    for block in model.blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    gathered = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return {}
    return dict(gathered.items())


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer,
                    checkpoint_id: str) -> None:
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint_id)


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer,
                    checkpoint_id: str) -> None:
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=checkpoint_id)
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
