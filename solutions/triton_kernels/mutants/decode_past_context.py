"""Decode attends to every slot of the last block, also those past the context length."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'mask tokens past context_lens[b]'
mutate_kernels(globals(), [
    ("token_mask = (offs_t < block_size) & (logical * block_size + offs_t < context_len)",
     "token_mask = offs_t < block_size"),
])
