"""harness.cases: one launch, many cases, each failing alone; the parent gets values or errors."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from harness import NotImplementedInRank, RankFailure, launch
from harness.cases import Memo, RankCase, capture, case_value, case_values, plain, run_cases
from harness.commlog import CommRecord, windows
from harness.impl import ImplSpec
from harness.payload import check_plain

STUB = ImplSpec(kind="dir", root=os.path.join(os.path.dirname(__file__), "fixtures", "impl",
                                              "tree", "assignments"), text="fixture:stub")


# -- rank functions -------------------------------------------------------------------------------
def rank_mixed(ctx):
    calc = ctx.impl_module("demo", "calc")

    def stubbed():
        return calc.compute(3) + 1

    def broken():
        return {"x": [1, 2]}["y"]

    return run_cases(ctx, [("value", lambda: {"t": torch.ones(2), "n": (1, 2.5)}),
                           ("stub", stubbed), ("broken", broken),
                           ("after", lambda: ctx.rank)])


def rank_one_rank_fails(ctx):
    """Case "bad" raises on rank 1 only, before any communication; the others then all-reduce
    in the next case, which must still work."""
    def bad():
        if ctx.rank == 1:
            raise ValueError("only rank 1 is wrong")
        return ctx.rank

    def collective():
        t = torch.tensor([float(ctx.rank)])
        dist.all_reduce(t)
        return t

    return run_cases(ctx, [("bad", bad), ("collective", collective)])


def rank_stuck_in_collective(ctx):
    """Rank 1 raises while the others wait in a collective it never joins; cases before and
    after it use collectives too (the one after on a rebuilt process group)."""
    def collective():
        t = torch.tensor([float(ctx.rank)])
        dist.all_reduce(t)
        return t

    def case():
        if ctx.rank == 1:
            raise ValueError("rank 1 gave up before the all-reduce")
        dist.all_reduce(torch.zeros(1000))

    def subgroup():
        group = ctx.new_group(list(range(ctx.world_size)))
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        return t

    return run_cases(ctx, [("before", collective), ("case", case), ("after", collective),
                           ("subgroup", subgroup)], abort_after=0.5)


def rank_stuck_with_groups_from_before(ctx):
    """As above, with a subgroup built before the cases: after the rebuild it is gone, so the
    cases after the failure are reported as not run, on every rank alike."""
    group = ctx.new_group(list(range(ctx.world_size)))

    def collective():
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        return t

    def case():
        if ctx.rank == 1:
            raise ValueError("rank 1 gave up before the all-reduce")
        dist.all_reduce(torch.zeros(1000), group=group)

    return run_cases(ctx, [("before", collective), ("case", case), ("after", collective)],
                     abort_after=0.5)


def rank_returns(ctx):
    return ctx.rank


def rank_stuck_in_a_receive(ctx):
    """Rank 1 raises while rank 0 waits for a message from it; the case after all-reduces on
    the rebuilt group."""
    def case():
        if ctx.rank == 1:
            raise ValueError("rank 1 gave up before sending")
        dist.recv(torch.zeros(1000), src=1)

    def collective():
        t = torch.tensor([float(ctx.rank)])
        dist.all_reduce(t)
        return t

    return run_cases(ctx, [("case", case), ("after", collective)], abort_after=0.5)


def rank_stuck_case_after_case(ctx, cases, abort_after=None):
    """Rank 0 raises in each of `cases` consecutive cases (a stub, before it sends) while ranks
    1 and 2 wait to receive from it: each case frees them, and no wait adds up to a hang."""
    def case():
        if ctx.rank == 0:
            raise NotImplementedError("send_weights")
        if ctx.rank in (1, 2):
            dist.recv(torch.zeros(2), src=0)
        return ctx.rank

    def collective():
        t = torch.ones(1)
        dist.all_reduce(t)
        return t

    return run_cases(ctx, [*((f"case{i}", case) for i in range(cases)), ("after", collective)],
                     abort_after=abort_after)


def rank_stuck_in_a_loop(ctx):
    """Rank 1 raises while rank 0 loops outside any collective: the launch ends, with the cause."""
    def case():
        if ctx.rank == 1:
            raise ValueError("rank 1 gave up")
        while True:
            time.sleep(0.05)

    return run_cases(ctx, [("case", case), ("next", lambda: 1)], abort_after=0.2,
                     sync_timeout=1.0)


def rank_unmet(ctx):
    """Two cases for disjoint halves without a meeting between them, then one for all."""
    def half(members):
        def run():
            if ctx.rank not in members:
                return None
            group_sum = torch.tensor([1.0])
            return float(group_sum.item()) * len(members)
        return run

    return run_cases(ctx, [RankCase("first", half((0,)), meet=False),
                           RankCase("second", half((1,))), ("all", lambda: "ok")])


# -- tests --------------------------------------------------------------------------------------
def test_values_errors_and_stubs_each_in_their_own_case():
    outcomes = launch(rank_mixed, world_size=1, impl=STUB).values[0]
    check_plain(outcomes)
    assert outcomes["value"]["ok"]
    value = case_value(outcomes["value"], "value")
    assert torch.equal(value["t"], torch.ones(2)) and value["n"] == [1, 2.5]
    assert case_value(outcomes["after"], "after") == 0

    stub = outcomes["stub"]["error"]
    assert stub["not_implemented"] and stub["type"] == "NotImplementedError"
    assert stub["function"] == "compute"
    assert "harness/cases.py" not in stub["traceback"] and "calc.py" in stub["traceback"]
    with pytest.raises(NotImplementedInRank) as caught:
        case_value(outcomes["stub"], "compute(3) + 1")
    first = str(caught.value).splitlines()[0]
    assert first.startswith("not implemented yet: compute: see README §1"), first

    broken = outcomes["broken"]["error"]
    assert not broken["not_implemented"] and broken["type"] == "KeyError"
    with pytest.raises(RankFailure) as caught:
        case_value(outcomes["broken"], "the lookup", rank=0, world_size=1)
    assert not isinstance(caught.value, NotImplementedInRank)
    first = str(caught.value).splitlines()[0]
    assert first.startswith("[rank 0 of 1] the lookup raised KeyError in"), first


def test_a_case_failing_on_one_rank_fails_that_case_only():
    started = time.monotonic()
    result = launch(rank_one_rank_fails, world_size=3, timeout=60)
    assert time.monotonic() - started < 30
    with pytest.raises(RankFailure, match=r"^\[rank 1 of 3\] bad raised ValueError"):
        case_values(result.values, "bad")
    assert [t.item() for t in case_values(result.values, "collective")] == [3.0] * 3
    # the meeting goes through the store: nothing in the log, nothing a Forbid could refuse
    assert all(r.op != "all_reduce" or r.numel == 1 for rank in result.comm for r in rank)
    assert sum(r.op == "all_reduce" for r in result.comm[0]) == 1


@pytest.mark.parametrize("transport", ["in-rank", "sidecar"])
@pytest.mark.parametrize("world_size", [2, 4])
def test_a_rank_stuck_in_a_collective_is_freed_and_only_its_case_fails(world_size, transport):
    """Under the sidecar transport the rank that raised has its sidecar shut the sidecars'
    connections; the collective the others waited in is not in the wire log."""
    if transport == "sidecar":  # its server starts once per process: not what is timed here
        launch(rank_returns, world_size=world_size, transport=transport, timeout=120)
    started = time.monotonic()
    result = launch(rank_stuck_in_collective, world_size=world_size, timeout=60,
                    transport=transport)
    assert time.monotonic() - started < 30
    total = float(sum(range(world_size)))
    assert [t.item() for t in case_values(result.values, "before")] == [total] * world_size
    # the rank that raised first is blamed, not the ones whose collective it broke
    with pytest.raises(RankFailure, match=rf"^\[rank 1 of {world_size}\] case raised "
                                          r"ValueError in [^:]*: rank 1 gave up"):
        case_values(result.values, "case")
    assert [t.item() for t in case_values(result.values, "after")] == [total] * world_size
    assert [t.item() for t in case_values(result.values, "subgroup")] == [world_size] * world_size
    if transport == "sidecar":
        assert result.wire is not None
        for records in result.wire:  # before, after, subgroup: the case's 4000 bytes never went
            assert [(w.kind, w.bytes, w.aborted) for w in records] == [("allreduce", 4, False)] * 3


def test_a_rank_stuck_in_a_receive_under_the_sidecar_is_freed():
    """The receive that rank 0 waited in is in its own log and, marked aborted, in its sidecar's
    (the launch's check of one against the other passes); `result.wire` leaves it out."""
    result = launch(rank_stuck_in_a_receive, world_size=2, timeout=60, transport="sidecar")
    with pytest.raises(RankFailure, match=r"^\[rank 1 of 2\] case raised ValueError"):
        case_values(result.values, "case")
    assert [t.item() for t in case_values(result.values, "after")] == [1.0, 1.0]
    assert [r.op for r in result.comm[0]] == ["recv", "all_reduce"]
    assert result.wire is not None
    assert [w.kind for w in result.wire[0]] == [w.kind for w in result.wire[1]] == ["allreduce"]


@pytest.mark.parametrize("transport", ["in-rank", "sidecar"])
def test_cases_after_a_rebuild_do_not_run_when_groups_came_from_before(transport):
    result = launch(rank_stuck_with_groups_from_before, world_size=3, timeout=60,
                    transport=transport)
    assert [t.item() for t in case_values(result.values, "before")] == [3.0] * 3
    with pytest.raises(RankFailure, match=r"^\[rank 1 of 3\] case raised ValueError"):
        case_values(result.values, "case")
    with pytest.raises(RankFailure, match=r"raised CaseNotRun: not run: case 'case' raised "
                                          r"ValueError on rank 1: rank 1 gave up"):
        case_values(result.values, "after")


@pytest.mark.parametrize("transport", ["in-rank", "sidecar"])
@pytest.mark.parametrize("abort_after", [None, 2.0])
def test_consecutive_cases_that_free_their_peers_are_not_a_hang(transport, abort_after):
    """Without subgroups from before the cases, the rank that raised frees the others after
    `QUICK_ABORT_AFTER_S`; and each case that starts is progress for the stall watch, so even
    2 s waits, four in a row (once 4 x 3 s asleep, ended as hung), keep one launch and every
    case its own outcome."""
    result = launch(rank_stuck_case_after_case, world_size=4, args=(4, abort_after),
                    timeout=120, transport=transport)
    for i in range(4):
        with pytest.raises(NotImplementedInRank, match="send_weights"):
            case_values(result.values, f"case{i}")
    assert [t.item() for t in case_values(result.values, "after")] == [4.0] * 4


def test_a_rank_stuck_outside_a_collective_ends_the_launch_with_the_cause():
    started = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 of 2 raised ValueError: rank 1 gave up"):
        launch(rank_stuck_in_a_loop, world_size=2, timeout=60)
    assert time.monotonic() - started < 30


def test_cases_without_a_meeting_still_keep_the_ranks_in_step():
    result = launch(rank_unmet, world_size=2)
    assert case_values(result.values, "first") == [1.0, None]
    assert case_values(result.values, "second") == [None, 1.0]
    assert case_values(result.values, "all") == ["ok", "ok"]


def test_capture_and_duplicate_names():
    assert capture(lambda x: x * 2, 4) == {"ok": True, "value": 8}
    outcome = capture(lambda: 1 / 0)
    assert not outcome["ok"] and outcome["error"]["type"] == "ZeroDivisionError"
    with pytest.raises(RankFailure, match="divide raised ZeroDivisionError"):
        case_value(outcome, "divide")
    assert case_value(None, "skipped") is None

    class Ctx:
        world_size = 1

    with pytest.raises(ValueError, match="two cases are named 'a'"):
        run_cases(Ctx(), [("a", lambda: 1), ("a", lambda: 2)])


def test_plain_leaves_only_plain_data():
    class Odd:
        pass

    x = torch.ones(2, requires_grad=True)
    value = plain({"t": x * 2, "tuple": (1, (2, 3)), 3: Odd(), (1, 2): None,
                   "np": torch.tensor(5).numpy()[()]})
    check_plain(value)
    assert not value["t"].requires_grad
    assert value["tuple"] == [1, [2, 3]] and value[3] == "<Odd>" and value["(1, 2)"] is None
    assert value["np"] == 5 and type(value["np"]) is int
    deep: list = []
    deep.append(deep)
    check_plain(plain(deep))


def test_memo_remembers_values_and_errors():
    calls = []
    memo = Memo(hang_timeout=5.0)

    def make(value):
        calls.append(value)
        if value == "bad":
            raise AssertionError("launch failed")
        return value

    assert memo.get(1, lambda: make("good")) == memo.get(1, lambda: make("again")) == "good"
    for _ in range(2):
        with pytest.raises(AssertionError, match="launch failed"):
            memo.get(2, lambda: make("bad"))
    assert calls == ["good", "bad"]
    assert memo.timeout(60.0) == 60.0


def test_memo_never_shortens_a_limit_after_a_hang():
    """A shorter limit after a RankTimeout could end a correct launch on a loaded machine."""
    from harness.errors import RankTimeout

    memo = Memo(hang_timeout=5.0)

    def hung():
        raise RankTimeout("hung", stacks={}, timeout=60.0)

    with pytest.raises(RankTimeout):
        memo.get("hung", hung)
    assert memo.seen_timeout and memo.timeout(60.0) == 60.0


def test_windows_cut_the_log_at_marks():
    records = [CommRecord(op="send", numel=1), CommRecord(op="mark", label="step 0"),
               CommRecord(op="send", numel=2), CommRecord(op="mark", label="inner"),
               CommRecord(op="recv", numel=3), CommRecord(op="mark", label="step 1"),
               CommRecord(op="send", numel=4), CommRecord(op="mark", label="step 0"),
               CommRecord(op="send", numel=5)]
    assert {k: [r.numel for r in v] for k, v in windows(records).items()} == {
        "step 0": [2, 5], "inner": [3], "step 1": [4]}
    steps = windows(records, "step ")
    assert [r.op for r in steps["step 0"]] == ["send", "mark", "recv", "send"]


# -- a case that hangs costs only itself, whatever the load ---------------------------------------
GROUP_TIMEOUT_S = 7.0  # above the stall watch's STALL_AFTER_S: the watch must wait for it


def rank_skips_a_collective(ctx, group_timeout):
    """Rank 0 leaves out the all-reduce of case "skipped" (on a group with its own collective
    timeout): the other ranks wait there until that timeout frees them, and only that case
    fails; the cases before and after keep their values."""
    from datetime import timedelta

    def collective():
        t = torch.tensor([float(ctx.rank)])
        dist.all_reduce(t)
        return t

    def skipped():
        group = ctx.new_group(list(range(ctx.world_size)),
                              timeout=timedelta(seconds=group_timeout))
        if ctx.rank != 0:
            dist.all_reduce(torch.ones(1), group=group)
        return ctx.rank

    return run_cases(ctx, [("before", collective), ("skipped", skipped), ("after", collective)])


def _outcomes(load: int) -> dict[str, str]:
    import subprocess
    import sys

    from harness.stall import STALL_AFTER_S

    assert GROUP_TIMEOUT_S > STALL_AFTER_S
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        result = launch(rank_skips_a_collective, world_size=3, args=(GROUP_TIMEOUT_S,),
                        timeout=90, stall_after=GROUP_TIMEOUT_S + 8)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    out = {}
    for name in ("before", "skipped", "after"):
        try:
            out[name] = str(case_values(result.values, name))
        except RankFailure as exc:
            out[name] = "failed: " + str(exc).splitlines()[0][:60]
    return out


def test_a_case_that_hangs_costs_only_itself_idle_and_under_load():
    """The stall watch waits longer than the cases' group timeout (launch(stall_after=...)):
    the hung case fails alone, the launch goes on, and the outcome is the same with CPU hogs
    running beside it."""
    idle = _outcomes(load=0)
    assert idle["before"] == idle["after"] == str([torch.tensor([3.0])] * 3)
    assert idle["skipped"].startswith("failed:")
    loaded = _outcomes(load=4)
    assert loaded.keys() == idle.keys()
    assert [v.startswith("failed:") for v in loaded.values()] == [False, True, False]
    assert loaded["before"] == loaded["after"] == idle["after"]


def test_the_earliest_cause_is_named_by_its_lowest_rank_when_every_rank_raised_it():
    """The same error raised by several ranks for themselves names the lowest of them, whichever
    the load let raise first; a different, earlier error is still the one reported."""
    from harness.cases import earliest_cause

    own = [(2.0, 0, {"type": "ValueError", "message": "rank 0 gave up at step 3"}, "a"),
           (1.0, 1, {"type": "ValueError", "message": "rank 1 gave up at step 3"}, "b"),
           (1.5, 3, {"type": "KeyError", "message": "'w'"}, "d")]
    assert earliest_cause(own) == (0, "a")
    broken = (0.5, 2, {"type": "RuntimeError", "message": "Connection closed by peer"}, "c")
    assert earliest_cause([*own, broken]) == (2, "c")
    assert earliest_cause(own[1:]) == (1, "b")
