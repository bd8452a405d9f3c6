"""A split keeps the original node as the upper part and makes a new node for the lower part
with a copy of the count: whoever referenced the node now holds the upper part, and its
dec_ref never reaches the lower part, which stays referenced (and unevictable) forever."""
from harness.mutation import mutate

MUTATES = "radix"
FEEDBACK = ("split", "lower")
mutate(globals(), "serving", "radix", replace=[
    ("        upper = _Node(node.tokens[:at], node.blocks[:at], parent, node.stamp)\n"
     "        upper.refs = node.refs\n"
     "        parent.children[upper.tokens[0]] = upper\n"
     "        node.tokens, node.blocks, node.parent = node.tokens[at:], node.blocks[at:], upper\n"
     "        upper.children[node.tokens[0]] = node\n"
     "        return upper\n",
     "        lower = _Node(node.tokens[at:], node.blocks[at:], node, node.stamp)\n"
     "        lower.refs, lower.children = node.refs, node.children\n"
     "        for child in lower.children.values():\n"
     "            child.parent = lower\n"
     "        node.tokens, node.blocks, node.children = node.tokens[:at], node.blocks[:at], {}\n"
     "        node.children[lower.tokens[0]] = lower\n"
     "        return node\n"),
])
