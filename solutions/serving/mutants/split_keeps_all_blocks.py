"""Splitting a node on a partial match trims the lower node's tokens but not its blocks."""
from harness.mutation import mutate

MUTATES = "radix"
FEEDBACK = "split"
mutate(globals(), "serving", "radix", replace=[
    ("node.tokens, node.blocks, node.parent = node.tokens[at:], node.blocks[at:], upper",
     "node.tokens, node.blocks, node.parent = node.tokens[at:], node.blocks, upper"),
])
