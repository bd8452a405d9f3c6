"""The decoded token is rotated at the position after its own (off by one in the KV cache)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "true position"
mutate(globals(), "gpt", "model", replace=[
    ("position = torch.arange(length, length + 1, device=idx.device)",
     "position = torch.arange(length + 1, length + 2, device=idx.device)"),
])
