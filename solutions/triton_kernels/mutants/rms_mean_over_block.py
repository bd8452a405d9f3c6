"""RMSNorm divides the sum of squares by the padded block width instead of the row width."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("mean_square = tl.sum(x * x, axis=0) / n_cols", "mean_square = tl.sum(x * x, axis=0) / BLOCK"),
])
