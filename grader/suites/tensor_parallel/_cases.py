"""Launch settings and case plumbing of the tensor_parallel hidden suite.

A launch runs a list of named *parts*, each in its own error scope (`harness.cases.run_cases`):
a part that raises is recorded and the rank goes on with the next, so a student who has written
the operators but not yet the cross-entropy still gets the operators graded, and a bug in
`gather_output` costs only the tests that read that part. The parent reads a part with
`harness.cases.case_values`: a stub's NotImplementedError comes back as "not implemented", any
other exception as an AssertionError naming the part (see harness/cases.py for how the ranks stay
in step when a part fails on some ranks only).

Cases carry their answers beside their inputs; `inputs_only` strips the answers
(`ANSWER_KEYS`) before a case travels to the ranks.
"""

from __future__ import annotations

from typing import Any

import torch

DTYPE = torch.float64
# Inputs and layers live on the CPU: values and call counts do not depend on the backend, and
# gloo runs everywhere (a GPU grader would otherwise pick NCCL, which needs CUDA tensors).
BACKEND = "gloo"
TIMEOUT_S = 90.0
# The launches whose communication is judged go over the sidecars: the windows the tests read
# are what the sidecars carried (`comm_windows`), not what the rank logged.
TRANSPORT = "sidecar"
ALL_REDUCE_OPS = frozenset({"all_reduce", "ProcessGroup.allreduce"})
NOT_COMMUNICATION = frozenset({"mark"})
ANSWER_KEYS = frozenset({"expected", "loss", "grad"})  # what the parent judges with, never sent


def inputs_only(cases: Any) -> Any:
    """`cases` without the parent's answers: every dict loses its `ANSWER_KEYS` (ranks get
    inputs, never verdicts: a rank can read whatever it is sent from its caller's frame)."""
    if isinstance(cases, dict):
        return {key: inputs_only(value) for key, value in cases.items()
                if key not in ANSWER_KEYS}
    if isinstance(cases, (list, tuple)):
        return type(cases)(inputs_only(value) for value in cases)
    return cases
