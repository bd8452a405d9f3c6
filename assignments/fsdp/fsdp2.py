"""FSDP2 the way production uses it: `fully_shard`, device meshes, DCP checkpoints.

Read README.md §6-§8 first. Here you do not shard anything by hand: you map the classic FSDP
sharding strategies onto `torch.distributed.fsdp.fully_shard` and `DeviceMesh`, choose a
mixed-precision policy, apply a wrapping policy (every block, then the root), and save and
load sharded checkpoints with `torch.distributed.checkpoint` (DCP).

Models. `shard_model` takes any `nn.Module` with an attribute `blocks`, an iterable of
submodules (an `nn.ModuleList`): those are the units; the root keeps every other parameter
(embeddings, head, ...). The suite's models are float32.

Every function here is collective: every rank of the default process group calls it, with the
same arguments, in the same order. The default process group is initialised (gloo on CPU in
the suite); meshes are on device type "cpu".
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")


def build_mesh(strategy: str, world_size: int, shard_size: int | None = None) -> DeviceMesh:
    """The device mesh (device type "cpu") that realises `strategy` on `world_size` ranks.

    - "FULL_SHARD" and "SHARD_GRAD_OP": a 1-D mesh over all ranks 0..N-1 (shard across all).
    - "NO_SHARD": a 2-D mesh of shape (N, 1), `mesh_dim_names=("replicate", "shard")`:
      every rank a replica, shard groups of one rank (FSDP2's way of saying DDP).
    - "HYBRID_SHARD" (HSDP): a 2-D mesh of shape (N // shard_size, shard_size),
      `mesh_dim_names=("replicate", "shard")`, rank r at row r // shard_size, column
      r % shard_size: shard inside groups of `shard_size` consecutive ranks (one node),
      replicate across them. On 4 ranks with shard_size=2 the shard groups are {0, 1} and
      {2, 3} and the replicate groups {0, 2} and {1, 3}.

    `shard_size` is used by "HYBRID_SHARD" only (ignored otherwise).

    Raises:
        ValueError: an unknown strategy (the message lists `STRATEGIES`); for
            "HYBRID_SHARD", `shard_size` None, < 1, or not dividing `world_size`.
    """
    raise NotImplementedError("build_mesh: see README §6")


def shard_model(model: nn.Module, strategy: str = "FULL_SHARD", *,
                shard_size: int | None = None,
                param_dtype: torch.dtype | None = None,
                reduce_dtype: torch.dtype | None = None) -> nn.Module:
    """Apply `fully_shard` to every block of `model.blocks` (in order), then to `model`.

    Mesh: `build_mesh(strategy, world size, shard_size)`, one mesh for all calls.
    `reshard_after_forward`: True for "FULL_SHARD" and "HYBRID_SHARD" (parameters freed after
    each block's forward, all-gathered again in backward), False for "SHARD_GRAD_OP" and
    "NO_SHARD" (kept from forward to backward: no all-gather in backward), the same value for
    the blocks and the root.

    Mixed precision: when `param_dtype` or `reduce_dtype` is given, pass
    `mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)` (the
    other one None) to every `fully_shard` call; otherwise pass no policy. The production
    policy is `param_dtype=torch.bfloat16, reduce_dtype=torch.float32`: compute in bf16,
    average the gradients in fp32, keep fp32 sharded parameters for the optimizer.

    Afterwards every parameter of `model` is a DTensor on the mesh, sharded on dim 0
    (`Shard(0)` on the shard dimension; `(Replicate(), Shard(0))` on a 2-D mesh), and an
    optimizer built over `model.parameters()` steps the local shards.

    Returns `model` itself (fully_shard changes it in place).

    Raises:
        ValueError: as `build_mesh`; a model without `blocks`.
    """
    raise NotImplementedError("shard_model: see README §6")


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded model state dict, gathered on rank 0 only.

    On rank 0: `{name: tensor}` for every entry of the unwrapped model's `state_dict()` (names
    as before sharding, e.g. "blocks.0.fc.weight"), full shapes, plain CPU `torch.Tensor`s (not
    DTensors) in the parameters' own dtype (float32 here, whatever the mixed-precision policy).
    On every other rank: an empty dict. Use `torch.distributed.checkpoint.state_dict`
    (`get_model_state_dict` with `StateDictOptions(full_state_dict=True, cpu_offload=True)`).
    """
    raise NotImplementedError("full_state_dict: see README §7")


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer,
                    checkpoint_id: str) -> None:
    """Save a sharded checkpoint of `model` and `optimizer` with DCP into folder `checkpoint_id`.

    Use `get_state_dict(model, optimizer)` (torch.distributed.checkpoint.state_dict) and
    `torch.distributed.checkpoint.save({"model": ..., "optim": ...}, checkpoint_id=...)`:
    each rank writes its own shards only (no rank gathers the model), rank 0 also writes the
    metadata. Pass `checkpoint_id` to DCP unchanged: it is a folder path or a URL DCP accepts
    (the suite passes an fsspec in-memory URL, "memory://...", private to each rank's process,
    and merges what the ranks wrote afterwards: do not assume ranks share a file system).
    """
    raise NotImplementedError("save_checkpoint: see README §7")


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer,
                    checkpoint_id: str) -> None:
    """Load what `save_checkpoint` wrote into an already sharded `model` and its `optimizer`.

    `model` was built and sharded by `shard_model` (same architecture, any strategy and any
    world size: a checkpoint saved on 4 ranks loads on 2), `optimizer` was built over its
    parameters with the same class and hyperparameters as the saved one and may not have
    stepped yet (empty state). Afterwards training continues as it would have without the
    interruption. Use `get_state_dict`, `torch.distributed.checkpoint.load` (in place) and
    `set_state_dict`. `checkpoint_id` (a folder path or a URL, passed to DCP unchanged) holds
    every file of the checkpoint (all ranks' shards and the metadata) on every rank.
    """
    raise NotImplementedError("load_checkpoint: see README §7")
