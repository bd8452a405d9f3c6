"""Treats a time-limit truncation like a terminal state: bootstraps 0 instead of
V(final observation), so the last steps before a time limit look worthless."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = ("truncated step bootstraps", "gamma * next_values")
mutate(globals(), "ppo", "ppo", replace=[
    ("bootstrap = torch.where(is_terminated, zero, next_values.to(values.dtype))",
     "bootstrap = torch.where(is_done, zero, next_values.to(values.dtype))"),
])
