"""rms_norm (hidden, 9 points): widths that are not powers of two, eps, layouts, scale.

Every case runs in one launch (Triton's interpreter, CPU, float32) and is compared with a
float64 torch reference within the float32 tolerance of grader.compare.
"""

from __future__ import annotations

import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import case_tests
from grader.suites.triton_kernels._ref import Case, rms_norm_ref

MEAN_HINT = "divide the sum of squares by the row width, not by your block size"


def build_cases() -> dict[str, Case]:
    gen = seeded_generator(30)

    def case(key: str, x: torch.Tensor, w: torch.Tensor, what: str, eps: float | None = None,
             hint: str = MEAN_HINT, layout: str = "contiguous") -> tuple[str, Case]:
        kwargs = {} if eps is None else {"eps": eps}
        name = f"rms_norm on {list(x.shape)} float32{what}"
        expected = rms_norm_ref(x, w, 1e-6 if eps is None else eps)
        return key, Case(name, "rms_norm", (x, w), expected, kwargs=kwargs, layout=layout,
                         hint=hint)

    zero_row = torch.randn(3, 48, generator=gen)
    zero_row[1] = 0.0
    return dict([
        case("d90", torch.randn(4, 90, generator=gen), torch.randn(90, generator=gen), ""),
        case("d781", torch.randn(3, 781, generator=gen), torch.randn(781, generator=gen), ""),
        case("eps", zero_row, torch.randn(48, generator=gen), " with eps=0.1 and a zero row",
             eps=0.1, hint="eps goes inside the square root: y = x / sqrt(mean(x^2) + eps) * w"),
        case("transposed", torch.randn(30, 20, generator=gen), torch.randn(20, generator=gen),
             " given column-major", layout="transposed",
             hint="use the input's strides (x.stride()), not its shape, to address it"),
        case("large", torch.randn(4, 70, generator=gen) * 1e3, torch.rand(70, generator=gen),
             " with values of magnitude ~1e3"),
        case("d1", torch.randn(5, 1, generator=gen), torch.randn(1, generator=gen),
             " (width 1)"),
        case("1x1", torch.randn(1, 1, generator=gen), torch.randn(1, generator=gen),
             " (one element)", hint="a one-element x is a row like any other"),
    ])


RMS_NORM = case_tests("rms_norm", build_cases())
case_runs = RMS_NORM.fixture


test_width_90 = RMS_NORM.test(2, "d90")
test_width_781 = RMS_NORM.test(1, "d781")
test_eps_and_zero_row = RMS_NORM.test(2, "eps")
test_non_contiguous_input = RMS_NORM.test(2, "transposed")
test_large_values = RMS_NORM.test(1, "large")
test_width_one = RMS_NORM.test(1, "d1", "1x1")
