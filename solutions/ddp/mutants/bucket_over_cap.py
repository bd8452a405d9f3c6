"""A bucket is closed only once it is already over the cap: buckets exceed bucket_cap_mb."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "cap"
mutate(globals(), "ddp", "ddp", replace=[
    ("if params and used + size > self.cap_bytes:", "if params and used > self.cap_bytes:"),
])
