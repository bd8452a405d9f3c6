"""Attention on float16/bfloat16 inputs computed in the inputs' dtype: the scores are rounded
to half precision before the softmax (README §5.4 requires float32)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = ("float16/bfloat16", "softmax", "float32")
mutate(globals(), "gpt", "model", replace=[
    ("    compute = _compute_dtype(q.dtype)\n    # 1/sqrt(d)",
     "    compute = q.dtype\n    # 1/sqrt(d)"),
])
