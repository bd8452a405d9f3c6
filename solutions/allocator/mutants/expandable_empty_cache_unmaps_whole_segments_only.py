"""STRETCH (expandable segments): empty_cache unmaps a segment's free last block only when it is
the whole segment (like releasing unsplit segments), not the whole pages of every free tail."""
from harness.mutation import mutate

FEEDBACK = "unmap the whole pages of free tails"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ('            if tail.state != "free":\n                continue\n'
     '            cut = -(-tail.address // PAGE_SIZE) * PAGE_SIZE',
     '            if tail.state != "free" or tail.prev is not None:\n                continue\n'
     '            cut = -(-tail.address // PAGE_SIZE) * PAGE_SIZE'),
])
