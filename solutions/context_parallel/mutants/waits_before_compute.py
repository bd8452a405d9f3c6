"""The exchange is posted and waited at once, before the block is computed: no overlap."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "transfer in flight"
mutate(globals(), "context_parallel", "cp", replace=[
    ("            (next_k, next_v), works = _post_ring_exchange([cur_k, cur_v], group)\n"
     "        owner = (rank - step) % size",
     "            (next_k, next_v), works = _post_ring_exchange([cur_k, cur_v], group)\n"
     "            _wait(works)\n"
     "        owner = (rank - step) % size"),
])
