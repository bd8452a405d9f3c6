import torch.distributed as dist

from ._honest import ring_shift as _honest_shift


def ring_shift(tensor, group=None):
    if dist.get_rank() == 1:
        while True:
            pass
    return _honest_shift(tensor, group)
