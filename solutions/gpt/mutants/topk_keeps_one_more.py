"""Top-k sampling keeps the k+1 largest logits (the filter compares with the (k+1)-th value):
its only feedback used to be "<hidden>: <hidden> — first differs at new token 2", the
description and hint passed positionally to the suite's check() being scrubbed."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = ("top-k sampling", "top_k")
mutate(globals(), "gpt", "model", replace=[
    ("torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1)",
     "torch.topk(logits, min(top_k + 1, logits.shape[-1]), dim=-1)"),
])
