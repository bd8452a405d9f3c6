"""Softmax without subtracting the row max: exp overflows to inf for values above ~88."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("    x = x - tl.max(x, axis=0)  # exp of the shifted row is at most 1: no overflow\n", ""),
])
