"""Sends go to r-1 and receives come from r+1, while the code still thinks block r-s arrives."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "direction"
mutate(globals(), "context_parallel", "cp", replace=[
    ("    nxt, prv = _global(group, (rank + 1) % size), _global(group, (rank - 1) % size)",
     "    prv, nxt = _global(group, (rank + 1) % size), _global(group, (rank - 1) % size)"),
])
