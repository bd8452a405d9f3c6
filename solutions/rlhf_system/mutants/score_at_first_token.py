"""Adds the reward model's score to the first response token instead of the last."""
from harness.mutation import mutate

MUTATES = "rlhf"
FEEDBACK = "last response token"
mutate(globals(), "rlhf_system", "rlhf", replace=[
    ("    rewards[rows, last] += scores.to(rewards.dtype)",
     "    rewards[rows, 0] += scores.to(rewards.dtype)"),
])
