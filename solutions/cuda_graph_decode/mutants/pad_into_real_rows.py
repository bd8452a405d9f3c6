"""Pads the bucket with entries at position 0 of row 0: every padded step overwrites the first
token of row 0's cache."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "model.pad_position"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("self._positions[start:stop].fill_(self.model.pad_position)",
     "self._positions[start:stop].fill_(0)"),
])
