"""copy_blocks copies the key block but forgets the value block."""
from harness.mutation import mutate

MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("        v_cache[dst] = v_cache[src]\n", "        pass\n"),
])
