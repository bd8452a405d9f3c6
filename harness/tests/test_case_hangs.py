"""harness.cases.launch_cases: a case that hangs costs only itself, on an idle machine and
beside CPU hogs, and so does a case that ends its launch (a rank exits in it); a hang outside
every case still ends the launch."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from harness import RankExit, RankFailure, RankTimeout, launch
from harness.cases import case_values, launch_cases, run_cases

NAMES = ("before", "hangs", "after", "also-hangs", "last")


def rank_two_cases_hang(ctx, names):
    """Cases "hangs" and "also-hangs" wait for a message rank 1 never sends (rank 0 blocked
    in recv, rank 1 at the meeting after the case): every rank asleep, a deadlock. The other
    cases all-reduce and must keep their values."""

    def collective():
        t = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(t)
        return t

    def hang():
        if ctx.rank == 0:
            dist.recv(torch.zeros(1), src=1)
        return ctx.rank

    fns = {"before": collective, "hangs": hang, "after": collective, "also-hangs": hang,
           "last": collective}
    return run_cases(ctx, [(name, fns[name]) for name in names])


def rank_hangs_outside_cases(ctx):
    run_cases(ctx, [("fine", lambda: ctx.rank)])
    dist.recv(torch.zeros(1), src=1 - ctx.rank)  # both ranks wait for the other
    return {}


def rank_one_case_exits(ctx):
    """Rank 1 leaves the process inside case "exits" (as a crash would): the launch ends."""
    import os

    def exits():
        if ctx.rank == 1:
            os._exit(3)
        return ctx.rank

    return run_cases(ctx, [("first", lambda: ctx.rank), ("exits", exits),
                           ("last", lambda: ctx.rank * 10)])


def _outcomes(load: int, names: tuple[str, ...] = NAMES) -> dict[str, str]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        result = launch_cases(lambda env: launch(rank_two_cases_hang, world_size=2,
                                                 args=(names,), env=env, timeout=120), names)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    out = {}
    for name in names:
        try:
            out[name] = str(case_values(result.values, name))
        except RankTimeout as exc:
            out[name] = "hung: " + str(exc).splitlines()[0]
        except RankFailure as exc:
            out[name] = "failed: " + str(exc).splitlines()[0]
    return out


def test_a_hung_case_costs_only_itself_idle_and_under_load():
    """Two cases of five hang: each is left out in turn, the three others get their values
    from the launch that finished, and the outcome does not change with CPU hogs beside it.
    The hung case's first line says which case hung and who waited on what."""
    idle = _outcomes(load=0)
    total = str([torch.tensor([3.0])] * 2)
    assert idle["before"] == idle["after"] == idle["last"] == total, idle
    for name in ("hangs", "also-hangs"):
        assert re.fullmatch(rf"hung: {name} hung: rank 0 of 2 waits in recv \(called from "
                            rf"test_case_hangs\.py:\d+ in hang\); rank 1 finished the case "
                            rf"and waits for the others", idle[name]), idle
    loaded = _outcomes(load=4, names=NAMES[:3])  # fewer launches: the hogs slow each one
    assert loaded == {name: idle[name] for name in NAMES[:3]}


def test_a_hang_outside_every_case_ends_the_launch():
    with pytest.raises(RankTimeout) as info:
        launch_cases(lambda env: launch(rank_hangs_outside_cases, world_size=2, env=env,
                                        timeout=60), ["fine"])
    assert info.value.cases == {0: "", 1: ""}


def test_a_case_that_ends_its_launch_costs_only_itself():
    result = launch_cases(lambda env: launch(rank_one_case_exits, world_size=2, env=env,
                                             timeout=60), ["first", "exits", "last"])
    assert case_values(result.values, "first") == [0, 1]
    assert case_values(result.values, "last") == [0, 10]
    with pytest.raises(RankExit, match=r"^exits: rank 1 of 2 exited with status 3"):
        case_values(result.values, "exits")


def test_no_case_is_left_out_beyond_max_left_out():
    """A launch whose hangs only its limit ends may cap how many cases are left out: past the
    cap, the error ends the launch as before."""
    with pytest.raises(RankExit, match=r"rank 1 of 2 exited with status 3"):
        launch_cases(lambda env: launch(rank_one_case_exits, world_size=2, env=env, timeout=60),
                     ["first", "exits", "last"], max_left_out=0)
