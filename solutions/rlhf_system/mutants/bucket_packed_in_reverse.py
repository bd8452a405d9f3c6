"""The sender packs each bucket in reverse manifest order; the receiver unpacks in order."""
from harness.mutation import mutate

MUTATES = "weight_sync"
FEEDBACK = "manifest order"
mutate(globals(), "rlhf_system", "weight_sync", replace=[
    ("    payloads = [torch.cat([_flat_bytes(tensors[i]) for i in bucket]) for bucket in buckets]",
     "    payloads = [torch.cat([_flat_bytes(tensors[i]) for i in reversed(bucket)])\n"
     "                for bucket in buckets]"),
])
