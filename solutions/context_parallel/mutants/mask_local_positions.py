"""The causal mask compares positions inside the block and ignores the offsets."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "global positions"
mutate(globals(), "context_parallel", "cp", replace=[
    ("        q_pos = torch.arange(q.shape[-2], device=q.device) + q_offset\n"
     "        k_pos = torch.arange(k.shape[-2], device=q.device) + k_offset\n"
     "        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float(\"-inf\"))\n"
     "    lse = torch.logsumexp(scores, dim=-1)",
     "        q_pos = torch.arange(q.shape[-2], device=q.device)\n"
     "        k_pos = torch.arange(k.shape[-2], device=q.device)\n"
     "        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float(\"-inf\"))\n"
     "    lse = torch.logsumexp(scores, dim=-1)"),
])
