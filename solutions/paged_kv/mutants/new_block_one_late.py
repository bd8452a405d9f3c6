"""Blocks needed = num_tokens // block_size (floor): a partial last block is never allocated."""
from harness.mutation import mutate

FEEDBACK = "ceil(num_tokens / block_size)"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("return -(-num_tokens // self.block_size)", "return num_tokens // self.block_size"),
])
