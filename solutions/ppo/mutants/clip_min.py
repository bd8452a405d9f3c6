"""Takes the min of the two negated surrogate terms where the max belongs: the optimistic bound,
so a large ratio keeps being pushed further whenever that helps. Still learns CartPole."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "max of the two negated terms, not the min"
mutate(globals(), "ppo", "ppo", replace=[
    ("loss = masked_mean(torch.maximum(unclipped, clipped), mask)",
     "loss = masked_mean(torch.minimum(unclipped, clipped), mask)"),
])
