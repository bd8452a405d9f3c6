"""The 1F1B cool-down runs the remaining backwards newest first (m-1 down to m-w)."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "cool-down"
mutate(globals(), "pipeline", "pipeline", replace=[
    ('return actions + [("B", i) for i in range(m - warmup, m)]',
     'return actions + [("B", i) for i in reversed(range(m - warmup, m))]'),
])
