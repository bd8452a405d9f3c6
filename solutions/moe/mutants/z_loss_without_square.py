"""The z-loss averages logsumexp without squaring it: it rewards negative logits instead of
penalising large ones."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "square the logsumexp"
mutate(globals(), "moe", "moe", replace=[
    ("    return torch.logsumexp(logits, dim=-1).square().mean()",
     "    return torch.logsumexp(logits, dim=-1).mean()"),
])
