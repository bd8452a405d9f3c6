"""Eviction takes the most recently released cached block instead of the least recent."""
from harness.mutation import mutate

FEEDBACK = "evict the block that became free the longest time ago first"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("self._evictable.popitem(last=False)", "self._evictable.popitem(last=True)"),
])
