"""Adds 2 instead of doubling.

TODO(grader new): at least 8 mutants, each one realistic mistake.
"""
from harness.mutation import mutate

MUTATES = "mesh"
FEEDBACK = "doubled"
mutate(globals(), "nd_parallel", "mesh", replace=[("return x * 2", "return x + 2")])
