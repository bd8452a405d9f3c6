"""softmax (hidden, 14 points): widths that are not powers of two, large values, layouts.

Every case runs in one launch (Triton's interpreter, CPU, float32) and is compared with a
float64 torch reference within the float32 tolerance of grader.compare.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._common import Case, check, run, softmax_ref, softmax_tolerance

MASK_HINT = "do padded columns (past the row's end) load as -inf so they add nothing?"


def build_cases() -> dict[str, Case]:
    gen = seeded_generator(20)

    def case(key: str, x: torch.Tensor, what: str, hint: str = MASK_HINT,
             layout: str = "contiguous") -> tuple[str, Case]:
        name = f"softmax on {list(x.shape)} float32{what}"
        return key, Case(name, "softmax", (x,), softmax_ref(x), layout=layout, hint=hint,
                         tol=softmax_tolerance(x))

    big = torch.randn(4, 200, generator=gen) * 1e4
    big[1] = big[1].abs() + 1e4  # every value huge and positive: exp overflows unshifted
    big[2] = -big[2].abs() - 1e4  # every value hugely negative: exp underflows unshifted
    return dict([
        case("single", torch.randn(1, 1, generator=gen), " (one element)"),
        case("w200", torch.randn(3, 200, generator=gen), ""),
        case("w781", torch.randn(5, 781, generator=gen), ""),
        case("100x90", torch.randn(100, 90, generator=gen), ""),
        case("pow2", torch.randn(2, 1024, generator=gen), " (a power-of-two width)"),
        case("constant", torch.full((3, 70), 5.0), " with constant rows",
             hint="a constant row gives 1/cols everywhere"),
        case("large", big, " with values of magnitude ~1e4",
             hint="subtract the row max before exp: exp(x) overflows float32 above ~88"),
        case("transposed", torch.randn(40, 33, generator=gen), " given column-major",
             hint="use the input's strides (x.stride()), not its shape, to address it",
             layout="transposed"),
    ])


CASES = build_cases()


@pytest.fixture(scope="module")
def results(launch):
    return run(launch, list(CASES.values()))


def _check(results, key: str) -> None:
    check(CASES[key], results[CASES[key].name])


@pytest.mark.exercises("softmax")
@pytest.mark.points(1)
def test_single_element(results):
    _check(results, "single")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_width_200(results):
    _check(results, "w200")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_width_781(results):
    _check(results, "w781")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_100_by_90(results):
    _check(results, "100x90")


@pytest.mark.exercises("softmax")
@pytest.mark.points(1)
def test_power_of_two_width(results):
    _check(results, "pow2")


@pytest.mark.exercises("softmax")
@pytest.mark.points(1)
def test_constant_rows(results):
    _check(results, "constant")


@pytest.mark.exercises("softmax")
@pytest.mark.points(3)
def test_large_values_stable(results):
    _check(results, "large")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_non_contiguous_input(results):
    _check(results, "transposed")
