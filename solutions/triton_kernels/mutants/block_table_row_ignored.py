"""Decode reads every sequence's blocks through row 0 of the block table."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'read block block_tables[b, t // block_size]'
mutate_kernels(globals(), [
    ("tl.load(tables_ptr + seq * stride_tb + logical * stride_tn)",
     "tl.load(tables_ptr + logical * stride_tn)"),
])
