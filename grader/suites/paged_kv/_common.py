"""Helpers shared by the paged_kv suite's test modules (parent side)."""

from __future__ import annotations

from typing import Any

from grader.compare import assert_close


def assert_close_fix_first(actual: Any, expected: Any, *, what: str, hint: str,
                           **kwargs: Any) -> None:
    """`grader.compare.assert_close`, with the fix right after what was compared and before the
    numbers: "<what>: <hint>; differs from the reference by ...". A long first line is cut at
    200 characters in reports, and the fix is the part a student must not lose."""
    try:
        assert_close(actual, expected, what=what, **kwargs)
    except AssertionError as exc:
        raise AssertionError(f"{what}: {hint}; {str(exc).removeprefix(what + ': ')}") from None
