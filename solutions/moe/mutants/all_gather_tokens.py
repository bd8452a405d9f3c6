"""Dispatch by all-gathering every rank's tokens (and their routing) and letting each rank pick
the rows of its experts: the values are right, but every token crosses every link, N-1 times
the all-to-all's bytes at best. The results still go back with the all-to-all."""
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "never all_gather"
mutate(globals(), "moe", "moe")


def _gather_padded(t, fill, group, size):
    n = torch.tensor([t.shape[0]])
    sizes = [torch.zeros_like(n) for _ in range(size)]
    dist.all_gather(sizes, n, group=group)
    longest = max(int(s) for s in sizes)
    pad = torch.cat([t, t.new_full((longest - t.shape[0], *t.shape[1:]), fill)])
    parts = [torch.empty_like(pad) for _ in range(size)]
    dist.all_gather(parts, pad, group=group)
    return parts


def _forward(self, x):
    size, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
    logits = self.router(x)
    weights, experts, _ = route(logits, self.k)
    capacity = None if self.capacity_factor is None else expert_capacity(
        x.shape[0], self.num_experts, self.k, self.capacity_factor)
    keep = capacity_mask(experts, self.num_experts, capacity)
    token_of = torch.arange(x.shape[0]).unsqueeze(1).expand_as(experts)[keep]
    expert_of, weight_of = experts[keep], weights[keep]
    order = torch.argsort(expert_of, stable=True)
    token_of, expert_of, weight_of = token_of[order], expert_of[order], weight_of[order]

    longest = max(int(t) for t in _gather_padded(torch.tensor([x.shape[0]]), 0, self.group,
                                                 size))
    padded = torch.cat([x, x.new_zeros(longest - x.shape[0], x.shape[1])])
    every_x = dist_nn.all_gather(padded, group=self.group)  # every token of every rank
    every_token = _gather_padded(token_of, -1, self.group, size)
    every_expert = _gather_padded(expert_of, -1, self.group, size)
    pieces, local_expert, recv_splits = [], [], []
    for i in range(size):
        valid = every_token[i] >= 0
        t_i, e_i = every_token[i][valid], every_expert[i][valid]
        mine = (e_i // self.local) == rank
        pieces.append(every_x[i][t_i[mine]])
        local_expert.append(e_i[mine] - self.first)
        recv_splits.append(int(mine.sum()))
    results = self._experts(torch.cat(pieces), torch.cat(local_expert))
    send_splits = [int(((expert_of // self.local) == j).sum()) for j in range(size)]
    returned = all_to_all_tokens(results, recv_splits, send_splits, self.group)
    y = x.new_zeros(x.shape).index_add(0, token_of, returned * weight_of.unsqueeze(1))
    return y, logits


MoELayer.forward = _forward
