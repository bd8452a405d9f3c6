"""f_i is taken as the mean router probability instead of the share of assignments: the loss
becomes E * sum P_i^2, which ignores what the top-k actually chose."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "fraction of assignments"
mutate(globals(), "moe", "moe", replace=[
    ("    f = counts / experts.numel()\n    p = probs.mean(dim=0)\n",
     "    p = probs.mean(dim=0)\n    f = p.detach() + 0 * counts\n"),
])
