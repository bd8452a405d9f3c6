"""The mesh is column-major: the first axis varies fastest, so TP groups are strided across
nodes and DP groups consecutive (values still right, every TP all-reduce on the slow link)."""
from harness.mutation import mutate

MUTATES = "mesh"
FEEDBACK = "row-major"
mutate(globals(), "nd_parallel", "mesh", replace=[
    ("    for name in reversed(list(sizes)):\n", "    for name in list(sizes):\n"),
    ("    for name, size in sizes.items():\n        if not 0 <= coords[name] < size:",
     "    for name, size in reversed(list(sizes.items())):\n"
     "        if not 0 <= coords[name] < size:"),
])
