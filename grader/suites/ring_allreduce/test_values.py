"""Values and cost of the ring collectives at every world size from 1 to 6 (hidden suite).

One launch per world size runs every case below; the tests judge slices of it: sizes D in
{0, 1, N-1, N+1, a large prime}, every op with every dtype, multi-dimensional and non-contiguous
inputs, reduce-scatter, all-gather, and the traffic of each call against the ring's budget.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ring_allreduce._cases import (
    FLOAT_DTYPES,
    INT_DTYPES,
    LARGE_PRIME,
    OPS,
    TIMEOUT_S,
    Case,
    gather_case,
    launch_memo,
    launch_sweep,
    reduction_case,
)
from grader.suites.ring_allreduce._ref_checks import check_all, check_ring_traffic

WORLD_SIZES = (1, 2, 3, 4, 5, 6)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def build_cases(world_size: int) -> list[Case]:
    """Every case of one world size, with inputs drawn from a fixed seed."""
    gen = seeded_generator(1000 + world_size)
    n = world_size
    cases: list[Case] = []
    size_names = {0: "D=0", 1: "D=1", n - 1: "D=N-1", n + 1: "D=N+1", LARGE_PRIME: "large D"}
    for numel in sorted(size_names):
        cases.append(reduction_case(
            gen, f"ring_all_reduce(op='sum') on float32, {size_names[numel]}", "all_reduce",
            "sum", (numel,), torch.float32, n, kind="sizes"))
    for dtype in FLOAT_DTYPES + INT_DTYPES:
        for op in OPS:
            if op == "avg" and not dtype.is_floating_point:
                continue
            cases.append(reduction_case(
                gen, f"ring_all_reduce(op='{op}') on {_dtype_name(dtype)}", "all_reduce", op,
                (3 * n + 2,), dtype, n, kind="ops"))
    for shape, layout, op, dtype in (((3, 4, 5), "contiguous", "sum", torch.float32),
                                     ((6, 5), "transposed", "max", torch.int64),
                                     ((4, 7), "strided", "avg", torch.float64),
                                     ((), "contiguous", "sum", torch.int32)):
        dims = f"{len(shape)}-d" if shape else "0-d"
        cases.append(reduction_case(
            gen, f"ring_all_reduce(op='{op}') on a {dims} {layout} {_dtype_name(dtype)} tensor",
            "all_reduce", op, shape, dtype, n, layout=layout, kind="layouts"))
    for shape, layout, op, dtype in (((n + 1,), "contiguous", "sum", torch.float32),
                                     ((LARGE_PRIME,), "contiguous", "avg", torch.float64),
                                     ((3, 5), "contiguous", "max", torch.int32),
                                     ((5, 4), "transposed", "sum", torch.bfloat16)):
        cases.append(reduction_case(
            gen, f"ring_reduce_scatter(op='{op}') on a {len(shape)}-d {layout} "
                 f"{_dtype_name(dtype)} tensor", "reduce_scatter", op, shape, dtype, n,
            layout=layout, kind="reduce_scatter"))
    for shape, layout, dtype in (((n + 1,), "contiguous", torch.float32),
                                 ((LARGE_PRIME,), "contiguous", torch.float64),
                                 ((2, 3, 4), "contiguous", torch.int64),
                                 ((3, 6), "strided", torch.float16)):
        cases.append(gather_case(
            gen, f"ring_all_gather on a {len(shape)}-d {layout} {_dtype_name(dtype)} tensor",
            shape, dtype, n, layout=layout, kind="all_gather"))
    return cases


@pytest.fixture(scope="module")
def sweep(launch):
    """world_size -> (cases, LaunchResult), launched once per world size."""
    memo = launch_memo()

    def run(world_size: int):
        cases = build_cases(world_size)
        result = memo.get(world_size, lambda: launch_sweep(
            launch, cases, world_size, timeout=memo.timeout(TIMEOUT_S)))
        return cases, result

    return run


def _judge(sweep, world_size: int, kind: str) -> None:
    cases, result = sweep(world_size)
    check_all(cases, result.values, world_size, kind)


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(1)
@pytest.mark.parametrize("world_size", WORLD_SIZES, ids="world_size={}".format)
def test_all_reduce_shapes_and_layouts(sweep, world_size):
    _judge(sweep, world_size, "layouts")


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", WORLD_SIZES, ids="world_size={}".format)
def test_all_reduce_sizes(sweep, world_size):
    _judge(sweep, world_size, "sizes")


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", WORLD_SIZES, ids="world_size={}".format)
def test_all_reduce_every_op_and_dtype(sweep, world_size):
    _judge(sweep, world_size, "ops")


@pytest.mark.exercises("ring_reduce_scatter")
@pytest.mark.points(1)
@pytest.mark.parametrize("world_size", WORLD_SIZES, ids="world_size={}".format)
def test_reduce_scatter(sweep, world_size):
    _judge(sweep, world_size, "reduce_scatter")


@pytest.mark.exercises("ring_all_gather")
@pytest.mark.points(1)
@pytest.mark.parametrize("world_size", WORLD_SIZES, ids="world_size={}".format)
def test_all_gather(sweep, world_size):
    _judge(sweep, world_size, "all_gather")


@pytest.mark.exercises("ring_all_reduce", "ring_reduce_scatter", "ring_all_gather")
@pytest.mark.points(1)
@pytest.mark.parametrize("world_size", WORLD_SIZES[1:], ids="world_size={}".format)
def test_ring_traffic_within_budget(sweep, world_size):
    """Every call with D >= N: (1 or 2)·(N-1) messages per rank, to the successor, in budget."""
    cases, result = sweep(world_size)
    check_ring_traffic(cases, result, world_size)
