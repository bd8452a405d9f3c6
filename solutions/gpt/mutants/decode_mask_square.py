"""The causal mask of a square problem (tril with no offset) also for fewer queries than keys:
a decode step sees only the first key."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "last seq_q positions"
mutate(globals(), "gpt", "model", replace=[
    (".tril(diagonal=seq_k - seq_q)", ".tril()"),
])
