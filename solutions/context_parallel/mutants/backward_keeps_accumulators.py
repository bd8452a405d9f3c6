"""Stretch: the ring backward rotates K/V but keeps the dK/dV accumulators on the rank, so each
rank's k/v gradient sums the wrong blocks' contributions."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "gradient accumulators"
mutate(globals(), "context_parallel", "cp", replace=[
    ("            (grad_k, grad_v), grad_works = _post_ring_exchange([grad_k, grad_v], group)",
     "            grad_works: list[dist.Work] = []"),
])
