"""The softmax runs over the k largest logits only: the weights come out right (that is what
renormalising does), but `probs` is zero outside the chosen experts, so the load-balancing loss
never sees the experts a token did not choose."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "softmax over all E experts"
mutate(globals(), "moe", "moe", replace=[
    ("""    probs = torch.softmax(logits, dim=-1)
    top, experts = torch.topk(probs, k, dim=-1)""",
     """    top_logits, experts = torch.topk(logits, k, dim=-1)
    top = torch.softmax(top_logits, dim=-1)
    probs = torch.zeros_like(logits).scatter(1, experts, top)"""),
])
