"""op='avg' divides by N in the reduce-scatter and again before the all-gather."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = "divide by N exactly once"
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("    _reduce_scatter_(flat, op, ring, bounds)\n    _all_gather_(flat, ring, bounds)",
     "    _reduce_scatter_(flat, op, ring, bounds)\n    if op == 'avg':\n"
     "        flat.div_(ring.size)\n    _all_gather_(flat, ring, bounds)"),
])
