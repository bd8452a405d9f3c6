"""After dropping, the kept choices' weights are renormalised to sum to 1 again: a dropped
choice's share goes to the other expert instead of to nothing."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "do not renormalise over the kept ones"
mutate(globals(), "moe", "moe", replace=[
    ("        keep = capacity_mask(experts, self.num_experts, capacity)\n",
     "        keep = capacity_mask(experts, self.num_experts, capacity)\n"
     "        kept = weights * keep\n"
     "        weights = kept / kept.sum(dim=-1, keepdim=True).clamp_min(1e-30)\n"),
])
