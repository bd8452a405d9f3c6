"""Returns a freed block to the cache without merging it with its free neighbours."""
from harness.mutation import mutate

FEEDBACK = "coalesce"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("for neighbour in (block.prev, block.next):", "for neighbour in ():"),
])
