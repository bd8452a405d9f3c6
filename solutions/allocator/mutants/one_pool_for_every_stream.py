"""Keeps one pool for every stream: a block freed on one stream is reused on another."""
from harness.mutation import mutate

FEEDBACK = "own pools"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("return self._pools.setdefault((block.is_small, block.stream), [])",
     "return self._pools.setdefault((block.is_small, 0), [])"),
    ("pool = self._pools.get((is_small, stream), [])", "pool = self._pools.get((is_small, 0), [])"),
])
