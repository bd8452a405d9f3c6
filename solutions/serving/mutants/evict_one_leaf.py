"""evict(n) removes at most one leaf per call, however many blocks were asked for."""
from harness.mutation import mutate

MUTATES = "radix"
FEEDBACK = ("evict(n)", "until n blocks")
mutate(globals(), "serving", "radix", replace=[
    ("            removed += len(victim.blocks)\n            self._size -= len(victim.blocks)\n",
     "            removed += len(victim.blocks)\n            self._size -= len(victim.blocks)\n"
     "            break\n"),
])
