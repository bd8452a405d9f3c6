"""What a rank function sees: `ctx`, its first argument."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from harness.commlog import CommLog, CommRecord
from harness.impl import ImplSpec, load_module


@dataclass
class RankContext:
    """Rank-side view of one launch.

    `rank`/`world_size` are global; `device` is `cuda:<local_rank>` under NCCL and `cpu` under
    gloo. The default process group is initialised before the rank function runs.
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    seed: int
    impl: str
    _impl_spec: ImplSpec
    _log: CommLog = field(repr=False)

    def impl_module(self, assignment_id: str, module_name: str) -> types.ModuleType:
        """Import the code under test for `<assignment_id>/<module_name>.py` (see --impl)."""
        return load_module(self._impl_spec, assignment_id, module_name)

    def comm_log(self) -> list[CommRecord]:
        """The communication calls made so far in this rank, in order."""
        return list(self._log.records)

    def clear_comm_log(self) -> None:
        self._log.records.clear()

    def mark(self, label: str) -> None:
        """Add a `mark` record to the log, e.g. to separate forward from backward traffic."""
        self._log.mark(label)

    def new_group(self, ranks: list[int], **kwargs: Any) -> dist.ProcessGroup:
        """`torch.distributed.new_group` (every rank must call it, with the same ranks)."""
        return dist.new_group(ranks=ranks, **kwargs)


def storage_bytes(*objects: Any) -> int:
    """Bytes of the distinct tensor storages reachable from `objects`.

    Follows tensors, `nn.Module` (parameters, their `.grad`, buffers), `torch.optim.Optimizer`
    (its state) and lists/tuples/dicts/sets. Views of one storage count once.
    """
    seen: dict[tuple[str, int], int] = {}

    def visit(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            seen[(str(obj.device), storage.data_ptr())] = storage.nbytes()
            if obj.grad is not None:
                visit(obj.grad)
        elif isinstance(obj, torch.nn.Module):
            for tensor in list(obj.parameters()) + list(obj.buffers()):
                visit(tensor)
        elif isinstance(obj, torch.optim.Optimizer):
            visit(list(obj.state.values()))
        elif isinstance(obj, dict):
            for value in obj.values():
                visit(value)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for value in obj:
                visit(value)

    for obj in objects:
        visit(obj)
    return sum(seen.values())
