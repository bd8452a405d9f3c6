"""Buckets packed in registration (forward) order: bucket 0 holds the first layer, whose
gradient arrives last, so nothing is launched until backward is over (no overlap)."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "reverse registration order"
mutate(globals(), "ddp", "ddp", replace=[
    ("self._buckets = self._pack(list(reversed(named)))", "self._buckets = self._pack(named)"),
])
