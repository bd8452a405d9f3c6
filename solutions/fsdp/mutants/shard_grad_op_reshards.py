"""SHARD_GRAD_OP mapped to reshard_after_forward=True: it is FULL_SHARD again."""
from harness.mutation import mutate

MUTATES = "fsdp2"
FEEDBACK = "SHARD_GRAD_OP backward"
mutate(globals(), "fsdp", "fsdp2", replace=[
    ('"SHARD_GRAD_OP": False,', '"SHARD_GRAD_OP": True,'),
])
