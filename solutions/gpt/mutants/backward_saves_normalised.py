"""RMSNormFunction also saves x * rstd for backward: right gradients, an extra x-sized tensor
kept alive from forward to backward."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "normalised output"
mutate(globals(), "gpt", "model", replace=[
    ("        ctx.save_for_backward(x, weight, rstd)\n",
     "        ctx.save_for_backward(x, weight, rstd, xf * rstd)\n"),
    ("        x, weight, rstd = ctx.saved_tensors\n        compute = rstd.dtype\n"
     "        xhat = x.to(compute) * rstd  # recomputed: one multiply, no extra memory held\n",
     "        x, weight, rstd, xhat = ctx.saved_tensors\n        compute = rstd.dtype\n"),
])
