"""What travels to the ranks for the nd_parallel suite: rank functions only.

TODO(grader new): one rank function per launch; cases run under `harness.cases.run_cases`, each in its
own error scope, so one stub fails only its case.
"""

from __future__ import annotations

from harness.cases import run_cases


def rank_example(ctx, inputs):
    module = ctx.impl_module("nd_parallel", "mesh")
    return run_cases(ctx, [(name, lambda x=x: module.example(x)) for name, x in inputs.items()])
