"""All-reduce through the group's first rank with point-to-point calls: right values, but the
root sends N-1 full tensors and everyone else one; not a ring, and over the byte budget."""
import torch
import torch.distributed as dist

from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("bytes", "budget", "never the whole tensor")
mutate(globals(), "ring_allreduce", "ring")


def ring_all_reduce(tensor, op="sum", group=None):
    _check_op(op, tensor.dtype)
    members = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    root = members[0]
    flat = _as_flat(tensor)
    if dist.get_rank() == root:
        incoming = torch.empty_like(flat)
        for peer in members[1:]:
            dist.recv(incoming, src=peer, group=group)
            _combine_(flat, incoming, op)
        if op == "avg":
            flat.div_(len(members))
        for peer in members[1:]:
            dist.send(flat, dst=peer, group=group)
    else:
        dist.send(flat, dst=root, group=group)
        dist.recv(flat, src=root, group=group)
    _write_back(tensor, flat)
    return tensor
