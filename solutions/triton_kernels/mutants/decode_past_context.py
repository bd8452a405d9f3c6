"""Decode attends to every slot of the last block, also those past the context length."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("token_mask = (offs_t < block_size) & (logical * block_size + offs_t < context_len)",
     "token_mask = offs_t < block_size"),
])
