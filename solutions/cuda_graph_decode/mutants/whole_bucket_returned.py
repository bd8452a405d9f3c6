"""Returns every row of the bucket, padded rows included."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "return only the batch's rows"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("return self._logits[bucket][:batch].clone()", "return self._logits[bucket].clone()"),
])
