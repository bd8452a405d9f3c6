"""Decode reads every sequence's blocks through row 0 of the block table."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("tl.load(tables_ptr + seq * stride_tb + logical * stride_tn)",
     "tl.load(tables_ptr + logical * stride_tn)"),
])
