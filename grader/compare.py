"""Tolerances, derived rather than tuned, and the comparison every suite uses.

Every tolerance here is a forward-error bound of floating-point arithmetic (Higham, *Accuracy
and Stability of Numerical Algorithms*, 2nd ed., §2–3): a computation that rounds `k` times in
sequence, in a format with unit roundoff `u`, is off by at most

    gamma(k) = k·u / (1 − k·u)

relative to the size of what it accumulates. A sum of `n` terms is off by at most
`gamma(n − 1) · Σ|terms|`, whatever the order of the additions (so another reduction order across
ranks, x86 vs Apple silicon, one or two torch threads are all inside it); a dot product of length
`n` by `gamma(n) · Σ|a_i·b_i|`. The bounds are worst-case, not typical — typical errors grow
like √k·u — so a correct implementation passes with a wide margin on any machine, and a wrong
formula (whose error is of the order of the values themselves) still fails.

References are computed in float64 wherever the code under test computes in a narrower dtype,
so the reference's own error (u = 2⁻⁵³) is negligible and the bound measures the student only.

Every comparison records its *margin* — observed error / tolerance, the worst element — so that
`python -m grader selfcheck` can show, per assignment, how close the reference solution comes to
its tolerances over several seeds and thread counts (a margin above 0.5 passes by luck).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from grader import leakcheck

# Unit roundoff u = 2^-(p) for a format with p bits of significand (the implicit bit included):
# the largest relative error of one correctly rounded operation.
UNIT_ROUNDOFF: dict[torch.dtype, float] = {
    torch.float64: 2.0 ** -53,
    torch.float32: 2.0 ** -24,
    torch.float16: 2.0 ** -11,
    torch.bfloat16: 2.0 ** -8,
}
# Margins above this are breaches in selfcheck: the solution passes by luck, not by design.
MAX_MARGIN = 0.5


@dataclass(frozen=True, slots=True)
class Tolerance:
    """|actual − expected| ≤ atol + rtol·|expected|, element-wise."""

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        if not (self.rtol >= 0 and self.atol >= 0):
            raise ValueError(f"tolerances must be non-negative, got {self}")

    def scaled(self, factor: float) -> Tolerance:
        return Tolerance(rtol=self.rtol * factor, atol=self.atol * factor)


def unit_roundoff(dtype: torch.dtype) -> float:
    """u of a floating dtype; 0.0 for integer and bool dtypes (compared exactly)."""
    return UNIT_ROUNDOFF.get(dtype, 0.0)


def gamma(k: float, dtype: torch.dtype) -> float:
    """gamma(k) = k·u/(1 − k·u): the relative error of `k` sequential roundings in `dtype`."""
    u = unit_roundoff(dtype)
    if k * u >= 1.0:
        raise ValueError(f"{k} roundings in {dtype} can lose every digit: no bound")
    return k * u / (1.0 - k * u)


def bound(dtype: torch.dtype, *, depth: float, magnitude: float = 1.0) -> Tolerance:
    """The tolerance of a result computed in `dtype` with `depth` sequential roundings.

    `magnitude` is the size of what the error is relative to (Σ|terms| of a sum, the largest
    |value| a result is a weighted average of): atol = gamma(depth)·magnitude, and
    rtol = gamma(depth) covers results larger than `magnitude`.
    """
    g = gamma(depth, dtype)
    return Tolerance(rtol=g, atol=g * magnitude)


# The default, for a comparison that does not say what it computes: elementwise work and short
# reductions (depth up to 256) on values of magnitude about 1. In float32 that is 1.5e-5; in
# float64, where references and students alike compute in float64, the same depth is ~3e-14 —
# the defaults below are that, times a factor that leaves room for library kernels that take
# another route (e.g. a fused or blocked matmul), and never looser than half an ulp of the next
# narrower format. Low-precision dtypes compare a handful of roundings (casts, one fused op).
DEFAULT_DEPTH = 256
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: bound(torch.float64, depth=DEFAULT_DEPTH).scaled(3e4),  # ≈ 8.5e-10
    torch.float32: bound(torch.float32, depth=DEFAULT_DEPTH),  # ≈ 1.5e-5
    torch.bfloat16: bound(torch.bfloat16, depth=4),  # ≈ 1.6e-2
    torch.float16: bound(torch.float16, depth=4),  # ≈ 2.0e-3
}
EXACT = Tolerance(rtol=0.0, atol=0.0)


def tolerance(dtype: torch.dtype, scale: float = 1.0) -> Tolerance:
    """The default tolerance for `dtype` (exact for integer and bool dtypes), times `scale`.

    Prefer a derived bound (`bound`, `sum_bound`, `softmax_bound`, `attention_bound`,
    `steps_bound`) for anything longer than the default's depth; `scale` is the depth ratio.
    """
    return TOLERANCES.get(dtype, EXACT).scaled(scale)


def sum_bound(dtype: torch.dtype, terms: int, magnitude: float = 1.0) -> Tolerance:
    """A sum of `terms` values with Σ|values| ≤ `magnitude`, added in any order.

    Error ≤ gamma(terms − 1)·Σ|x_i|; the division of an average adds one rounding.
    """
    return bound(dtype, depth=max(terms, 1) + 1, magnitude=magnitude)


def softmax_bound(dtype: torch.dtype, width: int, magnitude: float) -> Tolerance:
    """softmax over `width` entries whose |x − max| is at most `magnitude` (max-subtracted).

    exp(x − m) with an argument off by u·|x − m| is off by u·magnitude relatively, plus exp's own
    rounding; the normaliser Σ exp is a sum of `width` positive terms (gamma(width)); the
    division one more rounding. Probabilities are ≤ 1, so the error is absolute and relative.
    """
    u = unit_roundoff(dtype)
    relative = 2 * u * magnitude + gamma(width + 3, dtype)
    return Tolerance(rtol=relative, atol=relative)


def attention_bound(dtype: torch.dtype, *, head_dim: int, keys: int, score_sum: float,
                    value_max: float) -> Tolerance:
    """Attention out = softmax(q·kᵀ·scale)·v, computed blockwise with an online softmax.

    `score_sum` bounds Σ_d |q_d·k_d|·scale over every (query, key) pair: a score is a dot
    product, off by gamma(head_dim + 1)·score_sum. The running max is one of the scores, so a
    weight exp(s − m) is off relatively by twice that, plus u·|s − m| ≤ 2u·score_sum for the
    subtraction; each rescale exp(m_old − m_new) telescopes into the same argument, adding one
    rounding per rescale — at most one per key. The normaliser and the weighted sum of values
    are sums of `keys` terms, so out (a weighted average of values) is off by at most
    (weights' relative error + 2·gamma(keys + 2))·max|v|. lse = m + log Σ is off by the weights'
    relative error plus u·|lse|, covered by the same bound.
    """
    u = unit_roundoff(dtype)
    weights = 2 * gamma(head_dim + 1, dtype) * score_sum + 2 * u * score_sum + keys * u
    relative = weights + 2 * gamma(keys + 2, dtype)
    return Tolerance(rtol=relative, atol=relative * max(value_max, 1.0))


def steps_bound(dtype: torch.dtype, *, steps: int, depth_per_step: int,
                growth: float = 2.0, magnitude: float = 1.0) -> Tolerance:
    """State carried through `steps` updates, each adding `depth_per_step` roundings.

    An update can amplify the error it inherits (Adam divides by √v̂ + eps; a tanh network
    propagates a perturbation through its Jacobian): `growth` bounds that factor per step, so
    the error after `steps` is Σ_s growth^s · gamma(depth_per_step) ≤ steps·growth^steps·γ.
    """
    amplified = sum(growth ** s for s in range(steps))
    return bound(dtype, depth=depth_per_step, magnitude=magnitude).scaled(amplified)


# -- margins ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Margin:
    """One comparison's observed error over its tolerance (worst element) and what it was."""

    ratio: float
    what: str


_margins: list[Margin] = []


def take_margins() -> list[Margin]:
    """The margins recorded since the last call, and forget them (the plugin calls this)."""
    taken = list(_margins)
    _margins.clear()
    return taken


def margin_ratio(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> float:
    """max over elements of |actual − expected| / (atol + rtol·|expected|); 0 where both are
    the same non-finite value; inf where the tolerance is 0 and they differ."""
    a = actual.detach().cpu().to(torch.float64).flatten()
    e = expected.detach().cpu().to(torch.float64).flatten()
    if a.numel() == 0:
        return 0.0
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    diff = (a - e).abs().masked_fill(same, 0.0).nan_to_num(nan=math.inf)
    allowed = tol.atol + tol.rtol * e.abs().nan_to_num(nan=0.0, posinf=0.0)
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / allowed)
    return float(ratio.max())


def assert_close(actual: object, expected: torch.Tensor, *, what: str,
                 dtype: torch.dtype | None = None, scale: float = 1.0,
                 tol: Tolerance | None = None, hint: str = "", check_dtype: bool = True,
                 hint_first: bool = True) -> None:
    """Raise AssertionError unless `actual` matches `expected` within a tolerance.

    `what` names the value ("[rank 2 of 4] fc2.weight after step 3"); `hint` is the likely fix.
    `dtype` is the dtype the code under test must return (default: expected's), and picks the
    default tolerance; `expected` may be a float64 reference of a float32 result. `tol` is a
    derived bound for this comparison (see `bound` and friends); without it, the dtype's default
    times `scale`. The first line of the message says what, how much (max |Δ|) and where.
    `hint_first` (the default: the cause first) puts the hint right after `what`, before the
    numbers, in every message ("<what>: <hint> — <what is wrong>"): reports keep only the first
    line's first 200 characters, and a hint after the numbers would be cut. The two values
    quoted are printed with as many digits as it takes to tell them apart.
    Records the comparison's margin (see `take_margins`).
    """
    def first_line(problem: str) -> str:
        if hint and hint_first:
            return f"{what}: {hint} — {problem}"
        return f"{what}: {problem}{'; ' + hint if hint else ''}"

    leakcheck.compared(expected)
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(first_line(f"expected a tensor, got {type(actual).__name__}"))
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(first_line(f"shape {tuple(actual.shape)}, expected "
                                        f"{tuple(expected.shape)}"))
    want = dtype or expected.dtype
    if check_dtype and actual.dtype != want:
        raise AssertionError(first_line(f"dtype {actual.dtype}, expected {want}"))
    tol = tol if tol is not None else tolerance(want, scale)
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    if a.numel() == 0:
        return
    if tol.atol > 0 or tol.rtol > 0:
        _margins.append(Margin(margin_ratio(a, e, tol), what))
    nan_mismatch = torch.isnan(a) != torch.isnan(e)
    diff = (a - e).abs().nan_to_num(nan=0.0, posinf=float("inf"))
    bad = (diff > tol.atol + tol.rtol * e.abs().nan_to_num(nan=0.0)) | nan_mismatch
    bad |= torch.isinf(a) & torch.isinf(e) & (torch.sign(a) != torch.sign(e))
    if bool(bad.any()):
        count = int(bad.sum())
        flat = int(torch.argmax(bad.flatten().to(torch.int8)))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) \
            if a.dim() else ()
        first = first_line(
            f"differs from the reference by {float(diff.max()):.3g} (max |Δ|) in {count} of "
            f"{a.numel()} elements, first at {list(index)}: got %s, expected %s"
            % distinct(float(a.flatten()[flat]), float(e.flatten()[flat])))
        raise AssertionError(
            f"{first}\n(tolerance for {want}: rtol={tol.rtol:.3g}, atol={tol.atol:.3g})")


def distinct(got: float, expected: float) -> tuple[str, str]:
    """The two values with the fewest significant digits (at least 6, at most 17) that tell
    them apart: "-0.2651181" and "-0.2651183", never "-0.265118" twice."""
    for digits in range(6, 18):
        pair = (f"{got:.{digits}g}", f"{expected:.{digits}g}")
        if pair[0] != pair[1] or got == expected:
            return pair
    return (repr(got), repr(expected))


def describe(dtype: torch.dtype, scale: float = 1.0) -> str:
    """The default tolerance of `dtype` as READMEs state it: "float32: rtol 1.5e-05, atol
    1.5e-05" (a test keeps the READMEs' numbers equal to these)."""
    tol = tolerance(dtype, scale)
    return f"{str(dtype).removeprefix('torch.')}: rtol {tol.rtol:.2g}, atol {tol.atol:.2g}"
