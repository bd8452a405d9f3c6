"""Inserts the whole prompt + output into the cache when a request finishes, although the
last sampled token's KV was never computed: a later request reuses a block with no KV."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = "never computed"
mutate(globals(), "serving", "scheduler", replace=[
    ("            done = len(req.prompt) + len(req.output) - 1\n",
     "            done = len(req.prompt) + len(req.output)\n"),
])
