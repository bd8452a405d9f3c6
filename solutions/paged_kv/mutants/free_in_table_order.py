"""free releases blocks first to last: a shared prompt prefix is evicted before its tail."""
from harness.mutation import mutate

FEEDBACK = "free releases a table's blocks last block first"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("for block in reversed(table):", "for block in table:"),
])
