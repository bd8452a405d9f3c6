"""Stores the log-sum-exp in base 2 (m + log2 l) without converting back to natural log."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log2(l_i)"),
])
