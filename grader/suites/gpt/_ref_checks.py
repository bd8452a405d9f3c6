"""How the gpt hidden suite judges a probe's answer, in the parent.

`result` first fails a probe whose code made a forbidden call (recorded in the rank by
`_ranks.Watch`, also when the code caught the error), then re-raises a failed probe the way the
harness does ("not implemented yet: <name>" for a stub), then hands back its value. `close`
compares against a float64 reference and leads with a known mistake's message when the answer
matches it (`slips`). `static_forbidden` is the parent's half of the discipline check: the
forbidden names model.py's source mentions, read with `ast`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grader.compare import Tolerance, assert_close
from grader.suites.gpt._cases import F64
from harness.cases import case_value

FORBIDDEN_HINT = ("write it from matmuls, softmax and elementwise ops (README §5); the call "
                  "counts even when its error is caught")


def result(results: dict[str, Any], key: str, what: str) -> Any:
    """The probe's value; a forbidden call, a stub or a crash fails the test here."""
    seen = results["forbidden"].get(key) or []
    if seen:
        raise AssertionError(f"{what} called {seen[0]}, which is forbidden here; "
                             f"{FORBIDDEN_HINT}")
    return case_value(results["outcomes"][key], what)


def error_type(results: dict[str, Any], key: str, what: str) -> str | None:
    """The type name of the exception the probe raised, None if it returned; a stub or a
    forbidden call fails the test."""
    seen = results["forbidden"].get(key) or []
    if seen:
        raise AssertionError(f"{what} called {seen[0]}, which is forbidden here; "
                             f"{FORBIDDEN_HINT}")
    outcome = results["outcomes"][key]
    if outcome.get("ok"):
        return None
    error = outcome.get("error") or {}
    if error.get("not_implemented"):
        case_value(outcome, what)
    return str(error.get("type"))


def said(*, hint: str) -> str:
    """`hint`, marked as text for students (grader/session/reasons.py keeps hint= strings)."""
    return hint


def close(actual: Any, expected: torch.Tensor, what: str, *, dtype: torch.dtype,
          hint: str = "", tol: Tolerance | None = None,
          slips: Sequence[tuple[torch.Tensor, str]] = ()) -> None:
    """assert_close against a float64 reference, `dtype` being what the student returns.

    `slips`: (what a known mistake returns, what to tell its author). When `actual` is wrong
    and matches a slip, that message leads the first line."""
    try:
        assert_close(actual, expected, what=what, dtype=dtype, tol=tol, hint=hint)
        return
    except AssertionError:
        cause = matching_slip(actual, slips)
        if cause is None:
            raise
    assert_close(actual, expected, what=what, dtype=dtype, tol=tol, hint=cause, hint_first=True)


def matching_slip(actual: Any, slips: Sequence[tuple[torch.Tensor, str]]) -> str | None:
    if not isinstance(actual, torch.Tensor):
        return None
    a = actual.detach().to(F64)
    for value, message in slips:
        v = value.to(F64)
        if v.shape == a.shape and bool(torch.allclose(a, v, rtol=1e-3, atol=1e-4,
                                                      equal_nan=True)):
            return message
    return None


def grad_value(got: dict[str, Any], index: int, what: str) -> torch.Tensor:
    grad = got["grads"][index]
    if isinstance(grad, str):
        raise AssertionError(f"{what}: the input got no gradient ({grad}); compute the result "
                             f"from the inputs with differentiable torch operations")
    return grad




# ---- the parent-side half of the discipline check -----------------------------------------------

FORBIDDEN_ATTRIBUTES = {"scaled_dot_product_attention": "F.scaled_dot_product_attention",
                        "MultiheadAttention": "nn.MultiheadAttention",
                        "multi_head_attention_forward": "F.multi_head_attention_forward",
                        "rms_norm": "F.rms_norm", "RMSNorm": "nn.RMSNorm"}
# RMSNorm is also the name of the student's own class: only `x.RMSNorm` or an import of it
# from torch counts, never the bare name.


def static_forbidden(impl: Any) -> dict[str, list[str]]:
    """Forbidden names the submitted model.py mentions, read in this process with `ast` (the
    rank cannot touch it): top-level definition (or "<module>") -> ["line N: nn.RMSNorm", ...].

    Counts attribute accesses (`F.scaled_dot_product_attention`, `torch.nn.RMSNorm`), imports of
    the names from torch, and string constants equal to a name (`getattr(F, "rms_norm")`);
    docstrings and comments never count. The rank's watch (`_ranks.Watch`) sees the calls that
    actually run; this sees the ones a submission could hide from it."""
    import ast

    from harness.impl import module_path

    try:
        source = module_path(impl, "gpt", "model").read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, list[str]] = {}
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)}
    for top in tree.body:
        owner = top.name if isinstance(top, (ast.FunctionDef, ast.ClassDef)) else "<module>"
        for node in ast.walk(top):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
                name = node.attr
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
                name = next((a.name for a in node.names if a.name in FORBIDDEN_ATTRIBUTES),
                            None)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings and node.value in FORBIDDEN_ATTRIBUTES:
                name = node.value
            if name is not None:
                found.setdefault(owner, []).append(
                    f"line {getattr(node, 'lineno', 0)}: {FORBIDDEN_ATTRIBUTES[name]}")
    return found
