"""Preemption throws the generated output away: the request regenerates the same tokens
(sampling is seeded by position), at the cost of more forwards and computed tokens."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = ("preemption", "output")
mutate(globals(), "serving", "scheduler", replace=[
    ("        req.num_computed = 0\n        req.status = Status.WAITING\n",
     "        req.num_computed = 0\n        req.output.clear()\n        req.token_steps.clear()\n"
     "        req.status = Status.WAITING\n"),
])
