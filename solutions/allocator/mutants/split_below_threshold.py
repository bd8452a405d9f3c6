"""Splits large-pool blocks whenever 512 bytes remain, not only above 1 MiB."""
from harness.mutation import mutate

FEEDBACK = "split only when the remainder"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("    return remaining > SMALL_SIZE", "    return remaining >= MIN_BLOCK_SIZE"),
])
