"""record_stream does nothing: a block used by another stream is reused at once after free."""
from harness.mutation import mutate

FEEDBACK = "record_stream"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("            block.stream_uses.add(stream)", "            pass"),
])
