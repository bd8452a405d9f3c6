"""Hands the work to torch.distributed.all_reduce: right values, forbidden collective."""
import torch.distributed as dist

from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("all_reduce is forbidden", "point-to-point")
mutate(globals(), "ring_allreduce", "ring")

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}


def ring_all_reduce(tensor, op="sum", group=None):
    _check_op(op, tensor.dtype)
    flat = _as_flat(tensor)
    dist.all_reduce(flat, op=_REDUCE_OPS[op], group=group)
    if op == "avg":
        flat.div_(dist.get_world_size(group))
    _write_back(tensor, flat)
    return tensor
