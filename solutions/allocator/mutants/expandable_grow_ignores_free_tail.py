"""STRETCH (expandable segments): a miss maps pages for the whole request after the segment's
end, as if the free tail were not there, instead of only the pages the request lacks."""
from harness.mutation import mutate

FEEDBACK = "map only the pages the request lacks"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ('        have = tail.size if tail is not None and tail.state == "free" else 0\n',
     '        have = 0\n'),
])
