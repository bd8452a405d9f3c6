"""K/V heads tiled with repeat (head h reads h % n_kv) instead of repeat_interleave."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "repeat_interleave"
mutate(globals(), "gpt", "model", replace=[
    ("        k = k.repeat_interleave(group, dim=1)\n        v = v.repeat_interleave(group, dim=1)",
     "        k = k.repeat(1, group, 1, 1)\n        v = v.repeat(1, group, 1, 1)"),
])
