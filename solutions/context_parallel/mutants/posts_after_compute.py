"""The next block's exchange is posted after the current block is computed (and waited right
away): right values and messages, but transfer and compute never overlap."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "transfer in flight"
mutate(globals(), "context_parallel", "cp", replace=[
    ("        works: list[dist.Work] = []\n        if step < size - 1:\n"
     "            (next_k, next_v), works = _post_ring_exchange([cur_k, cur_v], group)\n"
     "        owner = (rank - step) % size",
     "        works: list[dist.Work] = []\n        owner = (rank - step) % size"),
    ("            _wait(works)\n        if step < size - 1:\n            # Dropping",
     "            _wait(works)\n        if step < size - 1:\n"
     "            (next_k, next_v), works = _post_ring_exchange([cur_k, cur_v], group)\n"
     "            _wait(works)\n            # Dropping"),
])
