"""softmax (hidden, 13 points): widths that are not powers of two, large values, layouts.

Every case runs in one launch (Triton's interpreter, CPU, float32) and is compared with a
float64 torch reference within the float32 tolerance of grader.compare.
"""

from __future__ import annotations

import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import case_tests
from grader.suites.triton_kernels._ref import Case, softmax_ref, softmax_tolerance

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
        case("w16384", torch.randn(2, 16384, generator=gen), " (the widest rows promised)",
             hint="rows up to 16384 wide are accepted; only wider ones raise ValueError"),
    ])


SOFTMAX = case_tests("softmax", build_cases())
case_runs = SOFTMAX.fixture


test_single_element = SOFTMAX.test(1, "single")
test_width_200 = SOFTMAX.test(2, "w200")
test_width_781 = SOFTMAX.test(2, "w781")
test_100_by_90 = SOFTMAX.test(1, "100x90")
test_power_of_two_width = SOFTMAX.test(1, "pow2", "w16384")
test_constant_rows = SOFTMAX.test(1, "constant")
test_large_values_stable = SOFTMAX.test(3, "large")
test_non_contiguous_input = SOFTMAX.test(2, "transposed")
