"""empty_cache releases a segment whose first block is free even when the segment is split."""
from harness.mutation import mutate

FEEDBACK = "unsplit"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ('if block.state == "free" and block.is_whole_segment:', 'if block.state == "free":'),
])
