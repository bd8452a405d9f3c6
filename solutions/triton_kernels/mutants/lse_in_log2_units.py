"""Stores the log-sum-exp in base 2 (m + log2 l) without converting back to natural log."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'natural log'
mutate_kernels(globals(), [
    ("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log2(l_i)"),
])
