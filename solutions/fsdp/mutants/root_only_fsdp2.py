"""fully_shard on the root only: one unit, one all-gather of the whole model."""
from harness.mutation import mutate

MUTATES = "fsdp2"
FEEDBACK = "wrapped separately"
mutate(globals(), "fsdp", "fsdp2", replace=[
    ("""    for block in model.blocks:
        fully_shard(block, **kwargs)
""", ""),
])
