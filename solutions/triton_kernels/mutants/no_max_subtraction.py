"""Softmax without subtracting the row max: exp overflows to inf for values above ~88."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'subtract the row max before exp'
mutate_kernels(globals(), [
    ("    x = x - tl.max(x, axis=0)  # exp of the shifted row is at most 1: no overflow\n", ""),
])
