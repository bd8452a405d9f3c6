"""Rewrites x * sigmoid(x) even when the sigmoid has another user (and keeps it for that user)."""
from harness.mutation import mutate

MUTATES = "fx_fusion"
FEEDBACK = "another user"
mutate(globals(), "framework", "fx_fusion", replace=[
    ("                and sig.args[0] is other and len(sig.users) == 1):",
     "                and sig.args[0] is other):"),
    ("""            graph.erase_node(node)
            graph.erase_node(sig)""", """            graph.erase_node(node)
            if not sig.users:
                graph.erase_node(sig)"""),
])
