"""Takes the first cached block that fits (lowest address) instead of the best fit."""
from harness.mutation import mutate

FEEDBACK = "best fit"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("        i = bisect.bisect_left(pool, (rounded, 0))\n"
     "        return self._free_blocks[pool[i][1]] if i < len(pool) else None",
     "        fits = [address for size, address in pool if size >= rounded]\n"
     "        return self._free_blocks[min(fits)] if fits else None"),
])
