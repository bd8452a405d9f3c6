"""Reduce-scatter indices off by one: rank p finishes chunk p+1 but returns and gathers chunk p."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = "check the chunk indices"
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("send_start, send_end = bounds[(ring.position - step - 1) % n]",
     "send_start, send_end = bounds[(ring.position - step) % n]"),
    ("recv_start, recv_end = bounds[(ring.position - step - 2) % n]",
     "recv_start, recv_end = bounds[(ring.position - step - 1) % n]"),
])
