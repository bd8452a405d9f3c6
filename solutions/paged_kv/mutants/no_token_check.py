"""A hash match counts as a hit without comparing token ids: a collision gives a false hit."""
from harness.mutation import mutate

FEEDBACK = "compare the token ids on a hash hit"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("if block is None or self._block_tokens[block] != blocks[i]:", "if block is None:"),
])
