"""Counts both gradients of convolution_backward even when the input needs none."""
from harness.mutation import mutate

MUTATES = "flops"
FEEDBACK = "output_mask"
mutate(globals(), "framework", "flops", replace=[
    ("    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))",
     "    return 2 * forward"),
])
