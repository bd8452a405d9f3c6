"""Rounds requests to multiples of 256 bytes instead of 512."""
from harness.mutation import mutate

FEEDBACK = "512"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("return -(-size // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE", "return -(-size // 256) * 256"),
])
