"""rotate_half in GPT-J's interleaved layout: pairs (0, 1), (2, 3) instead of (i, i + d/2)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "halves"
mutate(globals(), "gpt", "model", replace=[
    ("    half = x.shape[-1] // 2\n    x1, x2 = x[..., :half], x[..., half:]\n"
     "    return torch.cat((-x2, x1), dim=-1)",
     "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
     "    return torch.stack((-x2, x1), dim=-1).flatten(-2)"),
])
