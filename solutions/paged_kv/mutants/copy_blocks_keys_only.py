"""copy_blocks copies the key block but forgets the value block."""
from harness.mutation import mutate

FEEDBACK = ("v_cache after copy_blocks", "both caches")
MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("        v_cache[dst] = v_cache[src]\n", "        pass\n"),
])
