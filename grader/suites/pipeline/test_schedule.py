"""schedule: the exact action lists, the bubble of their replay, interleaving, bad arguments.

All calls run in one single-rank launch (`rank_pure`), each in its own error scope. The parent
compares each list with its own copy of the documented schedule, and replays every stage's
actions with their dependencies (`_ref.replay`: a forward costs 1, a backward 2, messages
nothing) to measure each stage's idle fraction, which must be (p-1)/(m+p-1) for GPipe and 1F1B.
The replay also proves the schedules cannot deadlock: it fails when no stage can move.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from grader.suites.pipeline._ranks import PureCall, rank_pure
from grader.suites.pipeline._ref import ReplayStuck, as_actions, check_schedule, replay
from harness.cases import Memo, case_value

pytestmark = pytest.mark.exercises("schedule")

GRID = [(p, m) for p in range(1, 7) for m in range(1, 13)]
INTERLEAVED = [(2, 2, 2), (2, 4, 3), (3, 6, 2), (4, 8, 2), (4, 4, 3), (4, 12, 4)]
KINDS = ("gpipe", "1f1b")
MEMO = Memo()
BAD = [("kind=unknown", ["zigzag", 2, 2, 0], {}),
       ("microbatches=0", ["gpipe", 2, 0, 0], {}),
       ("stages=0", ["1f1b", 0, 2, 0], {}),
       ("stage=p", ["1f1b", 2, 4, 2], {}),
       ("stage=-1", ["gpipe", 2, 4, -1], {}),
       ("1f1b-virtual=2", ["1f1b", 2, 4, 0], {"num_virtual": 2}),
       ("interleaved-v=1", ["interleaved", 2, 4, 0], {"num_virtual": 1}),
       ("interleaved-m%p", ["interleaved", 2, 3, 0], {"num_virtual": 2})]


def _calls() -> list[PureCall]:
    calls: list[PureCall] = [(f"{k}-p={p}-m={m}-s={s}", "schedule", [k, p, m, s], {}, False)
             for k in KINDS for p, m in GRID for s in range(p)]
    calls += [(f"interleaved-p={p}-m={m}-v={v}-s={s}", "schedule", ["interleaved", p, m, s],
               {"num_virtual": v}, False) for p, m, v in INTERLEAVED for s in range(p)]
    return calls + [(name, "schedule", args, kw, True) for name, args, kw in BAD]


def _outcomes(launch, impl) -> dict:
    return MEMO.get((impl, "schedules"), lambda: launch(rank_pure, 1, args=(_calls(),),
                                                timeout=120.0).values[0])


def _get(launch, impl, name: str):
    return case_value(_outcomes(launch, impl).get(name), f"schedule ({name})")


def _check_lists(launch, impl, kind: str, pairs) -> None:
    for p, m in pairs:
        for s in range(p):
            check_schedule(kind, p, m, s, _get(launch, impl, f"{kind}-p={p}-m={m}-s={s}"))


@pytest.mark.points(5)
def test_gpipe_lists(launch, impl):
    _check_lists(launch, impl, "gpipe", GRID)


@pytest.mark.points(4)
def test_1f1b_lists_more_microbatches_than_stages(launch, impl):
    _check_lists(launch, impl, "1f1b", [(p, m) for p, m in GRID if m >= p])


@pytest.mark.points(3)
def test_1f1b_lists_fewer_microbatches_than_stages(launch, impl):
    _check_lists(launch, impl, "1f1b", [(p, m) for p, m in GRID if m < p])


def _replayed(launch, impl, kind: str, p: int, m: int, v: int = 1):
    suffix = f"-v={v}" if kind == "interleaved" else ""
    actions = [as_actions(_get(launch, impl, f"{kind}-p={p}-m={m}{suffix}-s={s}")) or []
               for s in range(p)]
    try:
        return replay(actions, v)
    except (ReplayStuck, IndexError, TypeError) as exc:
        raise AssertionError(f"{kind} with p={p}, m={m}: the stages' actions deadlock when "
                             f"replayed with their dependencies ({exc})") from None


@pytest.mark.points(3)
@pytest.mark.parametrize("kind", KINDS)
def test_bubble_fraction(launch, impl, kind):
    for p, m in GRID:
        timeline = _replayed(launch, impl, kind, p, m)
        for s in range(p):
            got, want = timeline.idle_fraction(s), Fraction(p - 1, m + p - 1)
            assert got == want, (
                f"{kind} with p={p}, m={m}: stage {s} is idle {float(got):.4f} of the step, "
                f"expected (p-1)/(m+p-1) = {float(want):.4f}; the schedule stalls somewhere")


@pytest.mark.points(4)
def test_stretch_interleaved_lists(launch, impl):
    for p, m, v in INTERLEAVED:
        for s in range(p):
            check_schedule("interleaved", p, m, s,
                           _get(launch, impl, f"interleaved-p={p}-m={m}-v={v}-s={s}"), v)


@pytest.mark.points(3)
def test_stretch_interleaved_divides_bubble(launch, impl):
    for p, m, v in INTERLEAVED:
        timeline = _replayed(launch, impl, "interleaved", p, m, v)
        for s in range(p):
            idle = timeline.makespan - timeline.busy[s]
            want = Fraction(3 * (p - 1), v)  # the plain 1F1B bubble, 3(p-1) units, over v
            assert idle == want, (
                f"interleaved with p={p}, m={m}, v={v}: stage {s} idles {float(idle):.3f} "
                f"units, expected 3(p-1)/v = {float(want):.3f} (forward 1/v, backward 2/v)")


@pytest.mark.points(3)
def test_bad_arguments(launch, impl):
    got = _outcomes(launch, impl)
    for name, args, kw in BAD:
        raised = case_value(got.get(name), f"schedule ({name})")
        virtual = f", num_virtual={kw['num_virtual']}" if kw else ""
        assert raised == "ValueError", (
            f"schedule({', '.join(map(repr, args))}{virtual}) returned instead of raising "
            f"ValueError ({name})")
