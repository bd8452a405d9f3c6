"""Test side of the triton_kernels hidden suite: launches, case factories, paged inputs.

`run(launch, cases)` sends every case of a module to one rank in one launch (see
`_ranks.rank_cases`), in Triton's interpreter on CPU tensors. `case_tests` makes a module's
launch fixture and its graded tests (the harness's `CaseTests`), one line per test ("case
`key` is worth `points`"); `results_fixture` makes the launch fixture alone for a module that
writes its own tests. `paged_inputs` builds the inputs of paged decode.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from grader.suites.triton_kernels._ranks import rank_cases
from grader.suites.triton_kernels._ref import Case, check
from harness.case_tests import CaseTests

# Value tests run the kernels in Triton's interpreter on CPU tensors, on every machine, so a
# grade never depends on the grading hardware; compiled runs are in test_gpu.py.
INTERPRET_ENV = {"TRITON_INTERPRET": "1"}
LAUNCH_TIMEOUT_S = 300.0  # the interpreter is slow, and graders share loaded machines
# q, k_cache, v_cache, block_tables, context_lens: paged_attention_decode's arguments
PagedInputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def run(launch: Any, cases: list[Case]) -> dict[str, dict[str, Any]]:
    """Run every case in one launch; returns case name -> the rank's result dict."""
    result = launch(rank_cases, 1, args=([c.payload() for c in cases],), backend="gloo",
                    env=INTERPRET_ENV, timeout=LAUNCH_TIMEOUT_S)
    return {case.name: value for case, value in zip(cases, result.values[0])}


def results_fixture(cases: dict[str, Case]) -> Any:
    """The module-scoped fixture `results` of a test module (assign it to the module-level name
    `results`): every case of `cases` in one launch (`run`), case name -> the rank's result."""
    ordered = list(cases.values())

    @pytest.fixture(scope="module", name="results")
    def results(launch: Any) -> dict[str, dict[str, Any]]:
        return run(launch, ordered)

    return results


def case_tests(function: str, cases: dict[str, Case]) -> CaseTests[dict[str, dict[str, Any]]]:
    """The graded tests of a module whose cases each check one wrapper call of `function`
    (`harness.case_tests.CaseTests`):

        SOFTMAX = case_tests("softmax", build_cases())
        case_runs = SOFTMAX.fixture           # the module's launch (`run`)
        test_width_200 = SOFTMAX.test(2, "w200")

    `test(points, *keys, **check_kw)` is a test worth `points` that exercises `function` and
    passes when every case of `keys` passes `check(case, result, **check_kw)`.
    """
    ordered = list(cases.values())
    return CaseTests(
        run=lambda launch: run(launch, ordered),
        judge=lambda results, key, **kw: check(cases[key], results[cases[key].name], **kw),
        exercises=lambda keys: [function])


def paged_inputs(gen: torch.Generator, lengths: list[int], *, block_size: int, heads: int = 2,
                 dim: int = 16, spare_blocks: int = 3, table_dtype: torch.dtype = torch.int32
                 ) -> PagedInputs:
    """(q, k_cache, v_cache, block_tables, context_lens) for sequences of `lengths`.

    Physical blocks are a random permutation (so logical order never equals physical order),
    a few blocks belong to nobody, unused cache slots hold large values that would spoil any
    result that reads them, and tables are padded with -1 to the longest sequence (+1 column).
    """
    needed = [math.ceil(n / block_size) for n in lengths]
    num_blocks = sum(needed) + spare_blocks
    max_blocks = max(needed) + 1
    k_cache = torch.randn(num_blocks, block_size, heads, dim, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, heads, dim, generator=gen)
    physical = torch.randperm(num_blocks, generator=gen)
    tables = torch.full((len(lengths), max_blocks), -1, dtype=table_dtype)
    used = 0
    for b, (length, count) in enumerate(zip(lengths, needed)):
        tables[b, :count] = physical[used:used + count].to(table_dtype)
        used += count
        last, filled = int(physical[used - 1]), length - (count - 1) * block_size
        k_cache[last, filled:] = 30.0  # slots past the context: must be masked out
        v_cache[last, filled:] = 1e3
    for spare in physical[used:].tolist():
        k_cache[spare], v_cache[spare] = 30.0, 1e3
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    lens = torch.tensor(lengths, dtype=table_dtype)
    return q, k_cache, v_cache, tables, lens
