"""Sends a request of exactly 1 MiB to the large pool (< instead of <=)."""
from harness.mutation import mutate

FEEDBACK = "small pool"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("        is_small = rounded <= SMALL_SIZE\n", "        is_small = rounded < SMALL_SIZE\n"),
])
