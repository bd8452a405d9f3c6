"""Only rank 0 saves, as if it were an unsharded model: the other ranks' shards are lost."""
from harness.mutation import mutate

MUTATES = "fsdp2"
FEEDBACK = "every rank"
mutate(globals(), "fsdp", "fsdp2", replace=[
    ("""    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint_id)""",
     """    if dist.get_rank() == 0:
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint_id,
                 no_dist=True)"""),
])
