"""Hands the bf16 gradients to the fp32 optimizer as they are, without casting them up (after
silencing torch's grad-dtype check, as its error message suggests). SGD accepts them; AdamW's
fp32 state does not."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "cast the bf16 gradients up"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("master.grad = None if model.grad is None else model.grad.to(torch.float32)",
     "master.grad_dtype = None\n"
     "            master.grad = None if model.grad is None else model.grad"),
])
