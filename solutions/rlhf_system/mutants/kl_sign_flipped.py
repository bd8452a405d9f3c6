"""Pays the actor for drifting: the KL penalty with the wrong sign."""
from harness.mutation import mutate

MUTATES = "rlhf"
FEEDBACK = "KL penalty sign"
mutate(globals(), "rlhf_system", "rlhf", replace=[
    ("    rewards = -kl_coef * (logprobs - ref_logprobs)",
     "    rewards = kl_coef * (logprobs - ref_logprobs)"),
])
