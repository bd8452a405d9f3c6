"""The causal mask hides the query's own key (strictly lower triangular): row 0 sees nothing."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "diagonal"
mutate(globals(), "gpt", "model", replace=[
    (".tril(diagonal=seq_k - seq_q)", ".tril(diagonal=seq_k - seq_q - 1)"),
])
