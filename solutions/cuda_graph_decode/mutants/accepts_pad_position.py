"""Checks positions against max_len + 1: a real entry at the pad position slips through."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = ("a position equal to max_len", "expected ValueError")
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ('"positions": (positions, self.model.max_len),',
     '"positions": (positions, self.model.max_len + 1),'),
])
