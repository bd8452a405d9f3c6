"""attention tries F.scaled_dot_product_attention first and falls back when it raises: the values
are right, the call is forbidden (and counts even though the error was caught)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "forbidden"
mutate(globals(), "gpt", "model", replace=[
    ("    compute = _compute_dtype(q.dtype)\n    # 1/sqrt(d)",
     "    if seq_q == seq_k or not causal:\n"
     "        try:\n"
     "            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n"
     "        except RuntimeError:\n"
     "            pass\n"
     "    compute = _compute_dtype(q.dtype)\n    # 1/sqrt(d)"),
])
