"""Sends the prefill rank's whole KV cache for every request instead of the request's KV."""
from harness.mutation import mutate

MUTATES = "engine"
FEEDBACK = "bytes"
mutate(globals(), "serving", "engine", replace=[
    ("        dist.send(model.read_kv(blocks).contiguous(), dst)\n",
     "        dist.send(model.read_kv(list(range(model.num_blocks))).contiguous(), dst)\n"),
    ("        kv = torch.empty(2, n, model.dim, dtype=torch.float64)\n        dist.recv(kv, src)",
     "        whole = torch.empty(2, model.num_blocks, model.dim, dtype=torch.float64)\n"
     "        dist.recv(whole, src)\n        kv = whole[:, :n]"),
])
