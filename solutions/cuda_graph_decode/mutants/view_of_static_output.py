"""Returns a view of the graph's static output: the next replay of that bucket overwrites it."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "return a copy (clone)"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("return self._logits[bucket][:batch].clone()", "return self._logits[bucket][:batch]"),
])
