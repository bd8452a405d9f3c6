"""Reduces on the process group's backend object, which the Python-level comm log never sees.

Right values, no forbidden call in the log. Under the sidecar transport the backend object is
the sidecar's group, so the all-reduce is carried and judged on the wire (forbidden: point-to-
point only); in-rank, only the bytes counted from outside the rank would give it away.
"""
import torch
import torch.distributed as dist

from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("allreduce on the wire", "forbids")
mutate(globals(), "ring_allreduce", "ring")

_BACKEND_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}


def ring_all_reduce(tensor, op="sum", group=None):
    _check_op(op, tensor.dtype)
    flat = _as_flat(tensor)
    backend = (group or dist.group.WORLD)._get_backend(torch.device("cpu"))
    options = dist.AllreduceOptions()
    options.reduceOp = _BACKEND_OPS[op]
    backend.allreduce([flat], options).wait()
    if op == "avg":
        flat.div_(dist.get_world_size(group))
    _write_back(tensor, flat)
    return tensor
