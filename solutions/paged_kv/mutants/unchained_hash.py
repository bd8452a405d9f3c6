"""Each block is hashed from its own tokens only: equal blocks after different prefixes match."""
from harness.mutation import mutate

FEEDBACK = "chain the hash"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("parent = self.hash_block(parent, block_tokens)",
     "parent = self.hash_block(None, block_tokens)"),
])
