"""ComputeGuard: what it allows, what it flags, and that Triton's interpreter passes through it."""

from __future__ import annotations

import os

import pytest
import torch

from harness import launch
from harness.compute_guard import (
    _TRITON_DIR,
    TRITON_CODE,
    ComputeGuard,
    ComputeViolation,
    ForbiddenComputeError,
)

THIS_FILE = os.path.basename(__file__)


def _ops(guard: ComputeGuard) -> list[str]:
    return [v.op for v in guard.violations]


def test_allocation_views_and_copies_are_allowed():
    x = torch.randn(4, 6)
    with ComputeGuard("wrapper") as guard:
        torch.empty_like(x)
        torch.empty((2, 3), dtype=torch.float16)
        torch.zeros(5)
        torch.full((2,), 1.5)
        x.new_empty(3)
        x.view(6, 4).t().transpose(0, 1).reshape(-1)
        x[1:, ::2].unsqueeze(0).squeeze(0).expand(3, 3, 3)
        x.t().contiguous()
        x.to(torch.float64)
        torch.empty_like(x).copy_(x)
        x.clone().zero_()
        x.stride(), x.shape, x.numel(), x.is_contiguous()
    assert guard.violations == []
    assert {"empty_like", "view", "clone", "copy_"} <= guard.allowed_ops


def test_integer_bookkeeping_is_allowed():
    lengths = torch.tensor([3, 9, 4], dtype=torch.int32)
    with ComputeGuard("wrapper") as guard:
        longest = int(lengths.max())
        blocks = (lengths + 7) // 8
    assert guard.violations == [] and longest == 9 and blocks.tolist() == [1, 2, 1]


@pytest.mark.parametrize(("op", "call"), [
    ("aten.mm", lambda x: x @ x.t()),
    ("aten._softmax", lambda x: torch.softmax(x, dim=-1)),
    ("aten._softmax", lambda x: torch.nn.functional.softmax(x, dim=-1)),
    ("aten.exp", lambda x: x.exp()),
    ("aten.add", lambda x: x + 1),
    ("aten.sum", lambda x: x.sum(dim=0)),
    ("aten.rsqrt", lambda x: torch.rsqrt(x.abs())),
    ("aten.index", lambda x: x[torch.tensor([0, 2])]),
    ("aten.mul_", lambda x: x.clone().mul_(2.0)),
])
def test_float_compute_is_flagged_with_the_callers_line(op, call):
    x = torch.randn(3, 5)
    with ComputeGuard("wrapper", strict=False) as guard:
        call(x)
    assert op in _ops(guard), f"expected {op} among {_ops(guard)}"
    first = guard.violations[0]
    assert first.dtype == "float32"
    # torch's own Python frames (functional.py, _tensor.py) are skipped: the caller is here.
    assert first.where.startswith(f"{THIS_FILE}:"), first.where


def test_strict_raises_at_the_first_violation_with_the_fix():
    x = torch.randn(3, 5)
    with pytest.raises(ForbiddenComputeError) as info, ComputeGuard("softmax"):
        torch.exp(x)
    text = str(info.value)
    assert "softmax computed with torch instead of a Triton kernel" in text
    assert "aten.exp on a float32 tensor" in text and THIS_FILE in text


def test_violations_are_kept_even_when_the_code_swallows_the_error():
    guard = ComputeGuard("softmax")
    with guard:
        try:
            torch.randn(3).exp()
        except ForbiddenComputeError:
            pass
    assert _ops(guard) == ["aten.exp"]
    assert guard.message().startswith("softmax computed with torch")


def test_nothing_is_judged_outside_the_block():
    x = torch.randn(3)
    with ComputeGuard("wrapper", strict=False) as guard:
        pass
    x.exp()
    assert guard.violations == [] and guard.message() == ""
    assert ComputeViolation("aten.exp", "float32", "k.py:3 in f").describe() == \
        "aten.exp on a float32 tensor at k.py:3 in f"


def test_extra_allowed_ops():
    with ComputeGuard("wrapper", allow={"cumsum"}) as guard:
        torch.randn(4).cumsum(0)
    assert guard.violations == []


@pytest.mark.skipif(_TRITON_DIR is None, reason="triton is not installed")
def test_code_named_after_triton_is_not_triton():
    # A function whose code claims to live in triton's package: a name the submission chose.
    namespace: dict = {}
    code = compile("def internal(x):\n    return (x * 2).exp()\n",
                   os.path.join(_TRITON_DIR, "runtime", "interpreter.py"), "exec")
    exec(code, namespace)  # noqa: S102 - a constant snippet
    with ComputeGuard("wrapper", strict=False) as guard:
        namespace["internal"](torch.randn(3))
    assert guard.triton_ops == set()
    assert _ops(guard) == ["aten.mul", "aten.exp"]
    assert guard.violations[0].where == "interpreter.py:2 in internal"


@pytest.mark.skipif(_TRITON_DIR is None, reason="triton is not installed")
def test_triton_code_is_known_by_identity():
    from triton.runtime.interpreter import GridExecutor

    assert TRITON_CODE[id(GridExecutor._init_args_hst.__code__)] is \
        GridExecutor._init_args_hst.__code__
    assert id(test_triton_code_is_known_by_identity.__code__) not in TRITON_CODE


def test_reading_float_data_into_python_is_flagged():
    x = torch.randn(4)
    lengths = torch.tensor([3, 9], dtype=torch.int32)
    with ComputeGuard("wrapper", strict=False) as guard:
        int(lengths.max()), lengths[0].item()
        [float(v) for v in x]
    assert _ops(guard) == ["aten._local_scalar_dense"] * 4


def test_integers_made_from_float_data_stay_float_data():
    x = torch.randn(4, 4)
    with ComputeGuard("wrapper", strict=False) as guard:
        fixed = x.to(torch.int64)  # a copy: allowed, but the result is tainted
        fixed + 1
        x.view(torch.int32) >> 1
        fixed.max()
    assert _ops(guard) == ["aten.add", "aten.__rshift__", "aten.max"]
    assert guard.violations[0].dtype == "int64"


@pytest.mark.skipif(_TRITON_DIR is None, reason="triton is not installed")
def test_a_replaced_launch_path_is_a_violation():
    from triton.runtime.jit import JITFunction

    real = vars(JITFunction)["run"]
    try:
        with ComputeGuard("wrapper", strict=False) as guard:
            JITFunction.run = lambda self, *a, **k: None  # type: ignore[method-assign]
    finally:
        JITFunction.run = real  # type: ignore[method-assign]
    assert _ops(guard) == ["triton launch path replaced"]


# -- through the harness, with Triton's interpreter in a rank ----------------------------------
def rank_guarded_triton(ctx):
    """In a rank launched with TRITON_INTERPRET=1: a kernel, then a torch fallback, guarded."""
    import triton
    import triton.language as tl

    from harness.compute_guard import ComputeGuard, ForbiddenComputeError

    @triton.jit
    def scale_and_exp(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, tl.exp(a * 0.5), mask=mask)

    @triton.jit
    def tiny_matmul(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
        rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        tl.store(c_ptr + rm[:, None] * N + rn[None, :],
                 tl.dot(a, b, input_precision="ieee"))

    x = torch.randn(100)
    a, b = torch.randn(16, 32), torch.randn(32, 16)
    with ComputeGuard("kernel wrapper") as guard:
        y = torch.empty_like(x)
        scale_and_exp[(triton.cdiv(100, 64),)](x, y, 100, BLOCK=64)
        c = torch.empty(16, 16)
        tiny_matmul[(1,)](a, b, c, 16, 16, 32)
    fallback = ""
    try:
        with ComputeGuard("torch fallback"):
            (x * 0.5).exp()
    except ForbiddenComputeError as exc:
        fallback = str(exc)
    return {"interpret": os.environ.get("TRITON_INTERPRET"),
            "interpreted": type(scale_and_exp).__name__, "exp_error": (y - (x * 0.5).exp())
            .abs().max(), "dot_error": (c - a @ b).abs().max(), "violations": len(
                guard.violations), "triton_ops": sorted(guard.triton_ops), "fallback": fallback,
            "launches": guard.launches}


@pytest.mark.skipif(_TRITON_DIR is None, reason="triton is not installed")
def test_triton_interpreter_in_a_rank_passes_the_guard():
    result = launch(rank_guarded_triton, 1, env={"TRITON_INTERPRET": "1"}, backend="gloo",
                    timeout=120).values[0]
    assert result["interpret"] == "1" and result["interpreted"] == "InterpretedFunction"
    assert result["violations"] == 0, result
    assert result["triton_ops"], "the interpreter's own torch calls should be seen as triton's"
    assert result["launches"] == 2
    assert float(result["exp_error"]) < 1e-6 and float(result["dot_error"]) < 1e-4
    assert "torch fallback computed with torch" in result["fallback"]
    assert "aten.mul" in result["fallback"]

