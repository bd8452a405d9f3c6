"""Every rank sends before it receives, with blocking calls: a cycle of waits in any ring."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("send first", "cycle of waits")
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("    if ring.position % 2 == 0:\n        dist.send(",
     "    if True:\n        dist.send("),
])
