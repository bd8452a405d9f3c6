"""Ulysses' all-to-all splits the sequence and concatenates the heads: the transposed layout."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = ("heads", "sequence")
mutate(globals(), "context_parallel", "cp", replace=[
    ("        return torch.cat(_all_to_all(list(t.chunk(size, dim=1)), group), dim=2)",
     "        return torch.cat(_all_to_all(list(t.chunk(size, dim=2)), group), dim=1)"),
    ("    return torch.cat(_all_to_all(list(out_h.chunk(size, dim=2)), group), dim=1)",
     "    return torch.cat(_all_to_all(list(out_h.chunk(size, dim=1)), group), dim=2)"),
])
