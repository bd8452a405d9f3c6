"""Every received K/V block is kept in a list ("for the backward"): all K/V gathered, one step
at a time; values and messages are right, memory is N blocks."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "K/V blocks"
mutate(globals(), "context_parallel", "cp", replace=[
    ("    cur_k, cur_v = k, v\n    for step in range(size):\n        # Post the exchange",
     "    cur_k, cur_v = k, v\n    kept = []\n    for step in range(size):\n"
     "        kept.append((cur_k, cur_v))\n        # Post the exchange"),
])
