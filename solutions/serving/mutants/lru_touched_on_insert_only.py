"""Only insert stamps nodes; a prefix that is matched again and again still looks old."""
from harness.mutation import mutate

MUTATES = "radix"
FEEDBACK = "least recently used"
mutate(globals(), "serving", "radix", replace=[
    ("    def _walk(self, tokens: Sequence[int]) -> tuple[_Node, int]:",
     "    def _walk(self, tokens: Sequence[int], touch: bool = True) -> tuple[_Node, int]:"),
    ("            child.stamp = self.clock\n",
     "            if touch:\n                child.stamp = self.clock\n"),
    ("        node, _ = self._walk(tokens)\n",
     "        node, _ = self._walk(tokens, touch=False)\n"),
])
