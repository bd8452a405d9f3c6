"""Evicts leaves whatever their reference count: a prefix in use by a running request goes."""
from harness.mutation import mutate

MUTATES = "radix"
FEEDBACK = "referenced"
mutate(globals(), "serving", "radix", replace=[
    ("leaves = [n for n in self._nodes() if not n.children and n.refs == 0]",
     "leaves = [n for n in self._nodes() if not n.children]"),
])
