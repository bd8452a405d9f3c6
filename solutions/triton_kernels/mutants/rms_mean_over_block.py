"""RMSNorm divides the sum of squares by the padded block width instead of the row width."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'not by the block size'
mutate_kernels(globals(), [
    ("mean_square = tl.sum(x * x, axis=0) / n_cols", "mean_square = tl.sum(x * x, axis=0) / BLOCK"),
])
