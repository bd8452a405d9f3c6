"""Parent-side judging shared by the nd_parallel test modules: planner numbers within 1%,
training parity against the dense reference, and what the sidecar's wire log says about
groups and bytes (with the diagnosis that puts the real cause on a failure's first line).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from grader.compare import Tolerance, assert_close, steps_bound
from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._ranks import END
from harness.cases import where

PLANNER_RTOL = 0.01  # README §6: within 1% of the formulas
PLANNER_TOL = Tolerance(rtol=PLANNER_RTOL, atol=1e-12)
DEPTH_PER_STEP = 256  # roundings per SGD step of the small MLP (forward, backward, update)

# ---- the planner ------------------------------------------------------------------------------


def close(got: Any, want: float, what: str, hint: str) -> None:
    """A planner number within 1% (a float or int; bool and anything else fail)."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise AssertionError(f"{what}: {hint} — returned {type(got).__name__} {got!r}, "
                             f"expected a number")
    assert_close(torch.tensor(float(got), dtype=torch.float64),
                 torch.tensor(float(want), dtype=torch.float64), what=what, tol=PLANNER_TOL,
                 hint=hint, hint_first=True)


def close_dict(got: Any, want: dict[str, float], keys: list[str], what: str,
               hints: dict[str, str]) -> None:
    if not isinstance(got, dict) or set(got) != set(want):
        raise AssertionError(f"{what}: return a dict with exactly the keys {sorted(want)} — got "
                             f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
    for key in keys:
        close(got[key], want[key], f"{what}[{key!r}]", hints[key])


# ---- the wire ---------------------------------------------------------------------------------


def window(result: Any, rank: int, label: str) -> list[Any]:
    """The wire records of `rank` made while its latest mark was `label`."""
    return [w for w in result.wire[rank] if w.label == label]


def axis_groups_of(mesh: dict[str, int], rank: int) -> dict[str, tuple[int, ...]]:
    return {axis: tuple(R.group_of(mesh, axis, rank)) for axis in mesh}


def stray(records: list[Any], allowed: dict[str, tuple[int, ...]]) -> Any | None:
    """The first record on a group that is none of the rank's axis groups, else None."""
    ok = set(allowed.values())
    return next((w for w in records if tuple(w.group_ranks) not in ok), None)


def bytes_on(records: list[Any], group: tuple[int, ...]) -> int:
    return sum(w.bytes for w in records if tuple(w.group_ranks) == group)


def describe_groups(allowed: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{axis} {list(g)}" for axis, g in allowed.items())


def in_their_groups(result: Any, name: str, mesh: dict[str, int], what: str,
                    hint: str = "") -> Iterator[tuple[int, list[Any], dict[str, tuple[int, ...]]]]:
    """Per rank of case `name`: (rank, its wire records, its axis groups), after checking that
    every collective it ran was on one of its axis groups (`hint` ends that failure's
    message)."""
    world = len(result.wire)
    for r in range(world):
        records = window(result, r, name)
        allowed = axis_groups_of(mesh, r)
        bad = stray(records, allowed)
        assert bad is None, (
            f"{where(r, world)} {what}: a {bad.kind} ran on ranks {list(bad.group_ranks)}, none "
            f"of this rank's groups ({describe_groups(allowed)}){hint}")
        yield r, records, allowed


def each_rank_raised(got: list[Any], what: str, hint: str) -> None:
    """Every rank's answer (`got[r]`) to a call that must fail is "ValueError"; otherwise the
    message is "[rank r of n] `what`: `hint` — what that rank got"."""
    for r, answer in enumerate(got):
        assert answer == "ValueError", f"{where(r, len(got))} {what}: {hint} — {answer}"


def wire_diagnosis(result: Any, rank: int, name: str, mesh: dict[str, int],
                   grad_bytes: int | None, steps: int, act_bytes: int) -> str:
    """The cause the wire shows for case `name` on `rank`, or "" (README §8's budget).
    `act_bytes`: the size of one activation all-reduce of the TP layers ([rows, hidden])."""
    world = len(result.wire)
    records = window(result, rank, name)
    allowed = axis_groups_of(mesh, rank)
    bad = stray(records, allowed)
    if bad is not None:
        return (f"{where(rank, world)} a {bad.kind} ran on ranks {list(bad.group_ranks)}, "
                f"which is none of this rank's axis groups ({describe_groups(allowed)}): "
                f"average gradients on the data-parallel groups, TP on tp_group")
    if mesh["tp"] > 1 and bytes_on(records, allowed["tp"]) == 0:
        return (f"{where(rank, world)} nothing ran on the TP group {list(allowed['tp'])}: "
                f"give tp_group (not a DP group) to the TP layers")
    odd = next((w for w in records if tuple(w.group_ranks) == allowed["tp"] and
                w.bytes != act_bytes), None)
    if odd is not None:
        return (f"{where(rank, world)} a {odd.bytes} B {odd.kind} ran on the TP group "
                f"{list(allowed['tp'])}: only the TP layers' {act_bytes} B activations belong "
                f"there (b2's gradient is already whole on every TP rank)")
    if grad_bytes is not None and mesh.get("dp", 1) > 1 and "zero" not in mesh:
        got = bytes_on(records, allowed["dp"])
        if got != steps * grad_bytes:
            return (f"{where(rank, world)} the DP group {list(allowed['dp'])} carried {got} B "
                    f"in {steps} steps, the gradient shards are {grad_bytes} B per step: "
                    f"all-reduce each gradient element once per step on dp_group")
    return ""


# ---- training parity --------------------------------------------------------------------------


def parity_tol(magnitude: float, steps: int) -> Tolerance:
    return steps_bound(torch.float64, steps=steps, depth_per_step=DEPTH_PER_STEP,
                       magnitude=max(1.0, magnitude))


def check_shards(got: Any, want: dict[str, torch.Tensor], what: str, tol: Tolerance,
                 hint: str) -> None:
    if not isinstance(got, dict) or set(got) != set(want):
        raise AssertionError(f"{what}: return a dict with the keys of params {sorted(want)} — "
                             f"got {sorted(got) if isinstance(got, dict) else type(got).__name__}")
    for key in sorted(want):
        assert_close(got[key], want[key], what=f"{what} {key}", tol=tol, hint=hint,
                     hint_first=True)


__all__ = ["END", "PLANNER_TOL", "bytes_on", "check_shards", "close", "close_dict",
           "each_rank_raised", "in_their_groups", "parity_tol", "stray", "window", "wire_diagnosis"]
