"""round_to: bit for bit against torch's own casts on CPU (README §3).

The inputs: float32 values hypothesis draws (it favours the edges: ±0, subnormals, the largest
and smallest floats, inf, NaN), random bit patterns over the whole float32 range, and values
built for each format: exact midpoints between neighbours (ties, in the normal and the
subnormal range), the subnormals and their boundary, and the overflow threshold.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import hypothesis_examples, seeded_generator
from grader.suites.mixed_precision._cases import as_float32, error_of, launch_cases, outcome
from grader.suites.mixed_precision._ranks import rank_round
from grader.suites.mixed_precision._ref import SPECS, check_rounding, spacing

FORMATS = ("bf16", "fp16", "e4m3", "e5m2")


def drawn(fmt: str) -> torch.Tensor:
    from hypothesis import strategies as st

    seed = 4100 + FORMATS.index(fmt)
    floats = hypothesis_examples(st.floats(width=32, allow_nan=True, allow_infinity=True,
                                           allow_subnormal=True), 300, seed)
    around = float(torch.tensor(min(4 * SPECS[fmt][2], 3e38), dtype=torch.float32))
    near = hypothesis_examples(st.floats(-around, around, width=32), 200, seed + 10)
    gen = seeded_generator(seed + 20)
    bits = torch.randint(0, 2**32, (6000,), generator=gen, dtype=torch.int64)
    return torch.cat([torch.tensor(floats + near, dtype=torch.float32),
                      as_float32(bits.tolist())])


def ties(fmt: str) -> torch.Tensor:
    """Exact midpoints between neighbours: normal binades, the subnormal range, both signs."""
    mant, emin, top = SPECS[fmt]
    values = []
    for exponent in range(emin - 1, min(emin + 12, 30)):
        step = 2.0 ** (max(exponent, emin) - mant)
        base = 2.0 ** exponent if exponent >= emin else 0.0
        for k in range(0, 6):
            values.append(base + (k + 0.5) * step)
    values += [top - spacing(top, fmt) / 2, top + spacing(top, fmt) / 2]
    x = torch.tensor(values, dtype=torch.float64).to(torch.float32)
    return torch.cat([x, -x])


def subnormals(fmt: str) -> torch.Tensor:
    mant, emin, _ = SPECS[fmt]
    smallest = 2.0 ** (emin - mant)
    k = torch.arange(1, 2 ** mant + 3, dtype=torch.float64)
    x = torch.cat([k * smallest, k * smallest * 0.7, k * smallest * 1.3,
                   torch.tensor([smallest * 0.25, smallest * 0.5, smallest * 0.51,
                                 2.0 ** emin * 0.999, 2.0 ** -130, 2.0 ** -149])])
    x = x.to(torch.float32)
    return torch.cat([x, -x])


def overflow(fmt: str) -> torch.Tensor:
    top = SPECS[fmt][2]
    half_step = spacing(top, fmt) / 2
    x = torch.tensor([top, top + half_step * 0.99, top + half_step, top + half_step * 1.01,
                      top * 2, 3e38, float("inf"), 0.0, float("nan")], dtype=torch.float64)
    x = x.to(torch.float32)
    return torch.cat([x, -x])


def build() -> dict[str, tuple[torch.Tensor, str]]:
    cases: dict[str, tuple[torch.Tensor, str]] = {}
    for fmt in FORMATS:
        cases[f"drawn-{fmt}"] = (drawn(fmt), fmt)
        cases[f"ties-{fmt}"] = (ties(fmt), fmt)
        cases[f"subnormals-{fmt}"] = (subnormals(fmt), fmt)
        cases[f"overflow-{fmt}"] = (overflow(fmt), fmt)
    cases["bad-fmt"] = (torch.ones(2), "fp8")
    cases["bad-dtype"] = (torch.ones(2, dtype=torch.float64), "bf16")  # type: ignore[assignment]
    cases["shape"] = (torch.linspace(-3, 3, 24).reshape(2, 3, 4), "e4m3")
    return cases


CASES = build()


@pytest.fixture(scope="module")
def results(launch):
    return launch_cases(launch, rank_round, CASES)


def judge(results: dict, key: str) -> None:
    x, fmt = CASES[key]
    check_rounding(x, outcome(results, key, "round_to"), fmt, f"round_to(x, {fmt!r}) {key}")


@pytest.mark.points(2)
@pytest.mark.exercises("round_to")
@pytest.mark.parametrize("fmt", FORMATS, ids=[f"fmt={f}" for f in FORMATS])
def test_ties_go_to_even(results, fmt):
    judge(results, f"ties-{fmt}")


@pytest.mark.points(1)
@pytest.mark.exercises("round_to")
@pytest.mark.parametrize("fmt", FORMATS, ids=[f"fmt={f}" for f in FORMATS])
def test_subnormals_round_gradually(results, fmt):
    judge(results, f"subnormals-{fmt}")


@pytest.mark.points(1)
@pytest.mark.exercises("round_to")
@pytest.mark.parametrize("fmt", FORMATS, ids=[f"fmt={f}" for f in FORMATS])
def test_overflow_inf_and_nan(results, fmt):
    judge(results, f"overflow-{fmt}")


@pytest.mark.points(1)
@pytest.mark.exercises("round_to")
@pytest.mark.parametrize("fmt", FORMATS, ids=[f"fmt={f}" for f in FORMATS])
def test_drawn_floats_and_bit_patterns(results, fmt):
    judge(results, f"drawn-{fmt}")


@pytest.mark.points(1)
@pytest.mark.exercises("round_to")
def test_keeps_the_shape(results):
    judge(results, "shape")


@pytest.mark.points(1)
@pytest.mark.exercises("round_to")
def test_rejects_unknown_format_and_non_float32(results):
    for key, kind, given in (("bad-fmt", "ValueError", "fmt='fp8'"),
                             ("bad-dtype", "TypeError", "a float64 x")):
        error = error_of(results, key, "round_to")
        got = "returned" if error is None else error.get("type")
        assert got == kind, f"round_to with {given}: expected {kind}, got {got} (README §3)"
