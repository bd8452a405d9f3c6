"""Continues a chunked prefill only while the rest does not fit: the last chunk never runs
and the request is stuck half-prefilled."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = "last chunk"
mutate(globals(), "serving", "scheduler", replace=[
    ("            if remaining <= 1:\n", "            if remaining <= 1 or remaining <= budget:\n"),
])
