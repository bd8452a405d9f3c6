"""The partial last block of a prompt is hashed, cached and reused like a full one."""
from harness.mutation import mutate

FEEDBACK = "only full blocks are cached"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("            if len(block_tokens) < bs:\n"
     "                break  # a partial block is never hashed: its content is still growing\n",
     ""),
    ("for i in range((len(tokens) - 1) // bs):", "for i in range(len(hashes)):"),
    ("return list(table), len(hits) * bs",
     "return list(table), sum(len(blocks[i]) for i in range(len(hits)))"),
])
