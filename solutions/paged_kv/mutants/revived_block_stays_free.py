"""A cached free block hit again is shared but left on the free list: it can be evicted in use."""
from harness.mutation import mutate

FEEDBACK = "a cached free block reused by a hit is no longer free"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("                del self._evictable[block]  # revived: no longer free, so never evicted\n",
     "                pass\n"),
])
