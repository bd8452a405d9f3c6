"""The gradients are reduced in the compute dtype (bf16): 256 + 1 rounds to 256."""
from harness.mutation import mutate

MUTATES = "fsdp2"
FEEDBACK = "reduction in bf16"
mutate(globals(), "fsdp", "fsdp2", replace=[
    ("reduce_dtype=reduce_dtype)", "reduce_dtype=param_dtype)"),
])
