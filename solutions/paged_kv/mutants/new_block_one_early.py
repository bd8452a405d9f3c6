"""append_slot takes a new block when the last one still has one free slot (off by one)."""
from harness.mutation import mutate

FEEDBACK = "fill the last block, then take a new one"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("        if offset == 0:\n",
     "        if (length + 1) % self.block_size == 0 or not table:\n"),
])
