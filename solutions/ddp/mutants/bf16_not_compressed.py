"""The bf16 hook all-reduces in the bucket's own dtype: no bytes saved."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "bfloat16 all-reduce per bucket"
mutate(globals(), "ddp", "ddp", replace=[
    ("compressed = bucket.to(torch.bfloat16)", "compressed = bucket.clone()"),
])
