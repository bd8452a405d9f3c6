"""Updates the peak statistics only when the handed-out block was not split off a larger one."""
from harness.mutation import mutate

FEEDBACK = "peak"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("        self._update_peaks()\n        return block.address",
     "        if block.is_whole_segment:\n            self._update_peaks()\n"
     "        return block.address"),
])
