"""Starts each plan with max_num_tokens + 1 tokens of budget: one token too many per step."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = "budget"
mutate(globals(), "serving", "scheduler", replace=[
    ("        budget = self.max_num_tokens\n", "        budget = self.max_num_tokens + 1\n"),
])
