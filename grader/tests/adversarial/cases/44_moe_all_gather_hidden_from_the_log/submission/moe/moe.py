"""Runs an all-gather (of a per-rank token summary) in MoELayer's forward, hidden from the
in-rank log (its re-entrancy depth raised, the log found through dist.send's closure); the
layer's own three all-to-alls stay logged, so the log shows exactly the budget. Right values."""
import torch
import torch.distributed as dist

from ._honest import *  # noqa: F403
from ._honest import MoELayer

_real_forward = MoELayer.forward


def _find_log():
    for cell in dist.send.__closure__ or ():
        value = cell.cell_contents
        if hasattr(value, "records") and hasattr(value, "_local"):
            return value
    return None


def _forward(self, x):
    log = _find_log()
    size = dist.get_world_size(self.group)
    mine = x.detach().sum(dim=0)  # the same shape on every rank, whatever its token count
    everything = [torch.empty_like(mine) for _ in range(size)]
    if log is not None:
        log._local.depth = 1  # the wrappers think this call is inside another one
    dist.all_gather(everything, mine, group=self.group)  # a collective the budget forbids
    if log is not None:
        log._local.depth = 0
    return _real_forward(self, x)


MoELayer.forward = _forward
