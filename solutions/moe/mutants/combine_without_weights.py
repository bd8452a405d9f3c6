"""The returned expert outputs are added without their router weights: top-2 outputs are about
twice too large, and the router gets no gradient from the layer."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "router weight"
mutate(globals(), "moe", "moe", replace=[
    ("    y = x.new_zeros(x.shape).index_add(0, token_of, returned * weight_of.unsqueeze(1))",
     "    y = x.new_zeros(x.shape).index_add(0, token_of, returned)"),
])
