"""consolidated_state_dict never gathers: dst repeats its own shard for every rank's."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = "gather every rank's shard"
mutate(globals(), "zero2", "zero", replace=[
    ("parts = self._comm.gather(shard, dst)",
     "parts = [shard] * self.world_size if self.rank == dst else None"),
])
