"""The launcher's contract: fresh ranks, plain data back, every failure loud, nothing left over."""

from __future__ import annotations

import os
import time

import pytest
import torch

from harness import (
    LaunchError,
    NotImplementedInRank,
    PayloadError,
    RankExit,
    RankFailure,
    RankTimeout,
    launch,
)
from harness.launcher import resolve_backend
from harness.stall import STALL_AFTER_S, StallWatch
from harness.tests import rankfns
from harness.tests.conftest_helpers import alive, rank_processes


@pytest.fixture(autouse=True)
def no_leftovers():
    """Every test here also checks that no rank process outlives its call."""
    yield
    deadline = time.monotonic() + 3
    while rank_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not rank_processes(), f"processes left behind: {sorted(rank_processes())}"


def test_ranks_are_fresh_processes_with_an_initialised_group():
    first = launch(rankfns.describe, world_size=3, impl="solutions", seed=5)
    second = launch(rankfns.describe, world_size=3, impl="solutions", seed=5)
    for r, info in enumerate(first.values):
        assert info["rank"] == info["dist_rank"] == r
        assert info["world_size"] == info["dist_world"] == 3
        assert info["initialized"] and info["backend"] == "gloo" and info["device"] == "cpu"
        assert info["threads"] == 1 and info["seed"] == 5 and info["impl"] == "solutions"
    assert {i["pid"] for i in first.values}.isdisjoint(i["pid"] for i in second.values)
    # seeded per rank: reproducible across calls, different across ranks
    for a, b in zip(first.values, second.values):
        assert torch.equal(a["rand"], b["rand"]) and a["py_rand"] == b["py_rand"]
    assert not torch.equal(first.values[0]["rand"], first.values[1]["rand"])


def test_arguments_reach_every_rank_and_rank_args_are_appended():
    result = launch(rankfns.echo, world_size=2, args=(1, torch.ones(2)), kwargs={"k": "v"},
                    rank_args=[("a",), ("b",)])
    assert result.values[0]["args"][2] == "a" and result.values[1]["args"][2] == "b"
    assert torch.equal(result.values[1]["args"][1], torch.ones(2))
    assert result.values[0]["kwargs"] == {"k": "v"}


def test_plain_data_comes_back_compact_and_plain():
    value = launch(rankfns.plain_types).values[0]
    assert torch.equal(value["t"], torch.tensor([0, 2])) and value["t"].is_contiguous()
    assert type(value[7]) is torch.Tensor and value["size"] == (2, 3)
    assert value["l"] == [1, (2, 3)] and value["n"] is None and value["b"] is True


def test_non_plain_results_are_refused_with_the_path():
    with pytest.raises(PayloadError, match=r"result\['bad'\]\[0\] is a builtins.object"):
        launch(rankfns.return_object)


def test_results_over_the_cap_are_refused():
    with pytest.raises(PayloadError, match="over the 1 MiB cap"):
        launch(rankfns.return_huge, max_result_bytes=1024 * 1024)


def test_one_failing_rank_stops_the_others_at_once():
    start = time.monotonic()
    with pytest.raises(RankFailure) as info:
        launch(rankfns.raise_on_rank, world_size=3, args=(1, 60.0), timeout=60)
    assert time.monotonic() - start < 30  # not the 60 s the others would sleep
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert str(err).splitlines()[0] == "rank 1 of 3 raised ValueError: rank 1 hit a bad value"
    assert "raise_on_rank" in err.traceback and "about to fail on rank 1" in err.output_tail
    assert "rankmain.py" not in err.traceback  # the harness's own frames are trimmed


def test_a_deadlock_ends_at_the_limit_with_every_rank_stack():
    # 4 s: on a loaded machine the ranks may still be importing after 2 s; below the stall
    # watch's 5 s, so the wall-clock limit is what ends it here.
    start = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        launch(rankfns.deadlock, world_size=2, timeout=4)
    took = time.monotonic() - start
    # Not a speed assertion (load may stretch the stack collection and the teardown): only a
    # guard that the limit, not something far later, ended the launch.
    assert took < 4 + 120, f"took {took:.1f} s"
    err = info.value
    assert set(err.stacks) == {0, 1}
    summary = str(err).splitlines()
    assert "did not finish within 4 s" in summary[0]
    # who waited on what comes first: the only line a report keeps
    assert summary[0].startswith("ranks 0-1 of 2 wait in recv (called from rankfns.py:")
    assert all("in recv" in line and "rankfns.py" in line for line in summary[1:3])


def test_an_endless_loop_on_one_rank_is_a_timeout_naming_it():
    with pytest.raises(RankTimeout) as info:
        launch(rankfns.spin_on_rank, world_size=2, args=(1,), timeout=6)
    # Rank 0 returns at once on an idle machine; under load it may still be starting when the
    # limit comes, so only rank 1's presence and its named frame are the property here.
    assert 1 in info.value.stacks
    assert "spin_on_rank" in str(info.value)


def test_a_rank_ignoring_sigterm_is_still_killed():
    with pytest.raises(RankTimeout):
        launch(rankfns.ignore_sigterm_and_sleep, timeout=1)


@pytest.mark.parametrize("how, expect", [
    ("os_exit_0", "exited with status 0 without returning"),
    ("sys_exit_0", "called sys.exit(0)"),
    ("sys_exit_77", "called sys.exit(77)"),
    ("sigkill", "was killed by SIGKILL"),
])
def test_a_rank_that_exits_without_returning_fails(how, expect):
    with pytest.raises(RankExit, match=expect.replace("(", r"\(").replace(")", r"\)")):
        launch(rankfns.exit_how, world_size=2, args=(how, 1))


def test_the_stub_error_is_its_own_kind():
    with pytest.raises(NotImplementedInRank, match=r"^not implemented yet: .* \(rank 0 of 1\)"):
        launch(rankfns.use_impl, args=("demo", "missing_stub"), impl=_demo_impl("stub"))


def test_child_processes_of_ranks_are_killed_too(tmp_path):
    launch(rankfns.spawn_sleeper, world_size=2, args=(str(tmp_path / "pid"),))
    pids = [int((tmp_path / f"pid.{r}").read_text()) for r in range(2)]
    time.sleep(0.2)
    assert not any(alive(pid) for pid in pids)


def test_child_processes_are_killed_after_a_timeout(tmp_path):
    with pytest.raises(RankTimeout):
        launch(rankfns.spawn_sleeper_and_hang, args=(str(tmp_path / "pid"),), timeout=2)
    time.sleep(0.2)
    assert not alive(int((tmp_path / "pid.0").read_text()))


def test_huge_output_is_capped_not_a_deadlock():
    # 300 MiB of prints against the 256 MiB file-size cap: the rank fails, the parent does not hang
    with pytest.raises(LaunchError):
        launch(rankfns.print_lots, args=(300,), timeout=60)


def test_nested_functions_are_refused_before_starting_anything():
    def local(ctx):
        return 1

    with pytest.raises(ValueError, match="module-level function"):
        launch(local)


def test_a_sidecar_launch_keeps_gloo_where_gpus_cover_the_world(monkeypatch):
    """Simulated GPUs: `auto` would pick NCCL, but the sidecar's wire log is the cost verdict,
    so a sidecar launch stays on gloo (and refuses an explicit NCCL)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert resolve_backend("auto", 2) == "nccl"
    with pytest.raises(ValueError, match="sidecar"):
        launch(rankfns.describe, world_size=2, backend="nccl", transport="sidecar")
    result = launch(rankfns.describe, world_size=2, impl="solutions", transport="sidecar")
    assert result.backend == "gloo" and result.wire is not None


def test_backend_auto_is_gloo_without_enough_gpus():
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        assert resolve_backend("auto", 2) == "nccl"
    else:
        assert resolve_backend("auto", 2) == "gloo"
    with pytest.raises(ValueError, match="backend must be 'auto', 'gloo' or 'nccl'"):
        resolve_backend("mpi", 2)


def test_storage_bytes_counts_each_storage_once():
    assert launch(rankfns.hold).values[0] == 16 * 4 + 8 * 8


def _demo_impl(kind: str):
    from harness.impl import ImplSpec

    root = os.path.join(os.path.dirname(__file__), "fixtures", "impl", kind)
    return ImplSpec(kind="dir", root=root, text=f"fixture:{kind}")


def test_a_forged_result_file_without_returning_is_not_a_result():
    with pytest.raises(RankExit, match="without returning"):
        launch(rankfns.forge_result_and_exit, world_size=2)


def test_the_kernel_counts_traffic_the_log_cannot_see():
    numel = 250_000  # 1 MB per message
    honest = launch(rankfns.send_ring, world_size=2, args=(numel, False))
    sneaky = launch(rankfns.send_ring, world_size=2, args=(numel, True))
    for r in range(2):
        if honest.written_bytes[r] is None:
            pytest.skip("no /proc/<pid>/io on this machine")
        assert honest.unlogged_bytes(r) < 64 * 1024, honest.written_bytes
        # the backend's own allreduce bypasses torch.distributed's Python API entirely
        assert [rec.op for rec in sneaky.comm[r]] == ["isend", "irecv"]
        assert sneaky.unlogged_bytes(r) > numel * 4 // 2, sneaky.written_bytes


_PRELOAD_PROBE = """
import sys
sys.path.insert(0, {root!r})
from harness import launcher
from harness.tests import rankfns
assert launcher.preload("colorsys")
first = launcher.launch(rankfns.has_module, 1, args=("colorsys",)).values[0]
print(first, launcher.preload("wave"))
"""


def test_preload_imports_once_in_the_forkserver_and_only_before_it_starts():
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", _PRELOAD_PROBE.format(root=root)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "False"]


def test_a_deadlock_is_reported_long_before_the_limit():
    """Every rank asleep in recv, using almost no CPU: hung, said after STALL_AFTER_S."""
    start = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        launch(rankfns.deadlock, world_size=2, timeout=60)
    took = time.monotonic() - start
    assert took < STALL_AFTER_S + 10, f"took {took:.1f} s of a 60 s limit"
    first = str(info.value).splitlines()[0]
    assert "did not finish within 60 s" in first and "deadlock" in first
    assert "asleep" in first and set(info.value.stacks) == {0, 1}


def test_a_rank_that_computes_while_the_other_waits_is_not_hung():
    """Rank 1 spins past STALL_AFTER_S while rank 0 waits for it in recv: no stall."""
    values = launch(rankfns.slow_sender, world_size=2, args=(STALL_AFTER_S + 2,),
                    timeout=60).values
    assert values == [1.0, None]


def test_the_stall_watch_wants_a_whole_idle_window():
    watch = StallWatch(after=0.3, every=0.0)
    own = os.getpid()  # this test's process runs while it samples itself: never idle
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        assert not watch.stalled([own])
    assert not StallWatch(after=0.0, every=0.0).stalled([])  # nothing left to watch


def test_a_failed_rendezvous_is_made_once_more_and_nothing_else_is(monkeypatch):
    """`launch` retries only RendezvousError (the rank function never ran), and only once."""
    from harness import launcher
    from harness.rankmain import RENDEZVOUS_ERROR

    def failure(kind: str) -> RankFailure:
        return RankFailure(f"rank 0 of 2 raised {kind}", rank=0, exc_type=kind, message="x",
                           traceback="", output_tail="")

    for kinds, expect_calls, expect_ok in (([RENDEZVOUS_ERROR], 2, True),
                                           ([RENDEZVOUS_ERROR, RENDEZVOUS_ERROR], 2, False),
                                           (["ValueError"], 1, False)):
        calls = []

        def once(*args, kinds=kinds, calls=calls, **kwargs):
            calls.append(1)
            if len(calls) <= len(kinds):
                raise failure(kinds[len(calls) - 1])
            return "launched"

        monkeypatch.setattr(launcher, "_launch_once", once)
        if expect_ok:
            assert launcher.launch(rankfns.describe, world_size=2) == "launched"
        else:
            with pytest.raises(RankFailure):
                launcher.launch(rankfns.describe, world_size=2)
        assert len(calls) == expect_calls, kinds


def test_ranks_find_torch_s_lazy_imports_already_made():
    """What torch imports lazily on a rank's first backward(grad) (symbolic shapes: sympy) and
    what the rank's seeding needs (numpy.random) come preloaded from the forkserver, not paid
    for by every rank; without CUDA, Triton is set up for its interpreter."""
    names = ("torch.fx.experimental.symbolic_shapes", "sympy", "numpy.random")
    value = launch(rankfns.preloaded, 1, args=(names,)).values[0]
    assert value["modules"] == dict.fromkeys(names, True)
    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        assert value["triton_interpret"] == "1"


def test_a_launch_trace_names_each_launch_and_its_outcome(tmp_path, monkeypatch):
    """`MLSYS_LAUNCH_TRACE`: one JSON line per launch, written by the parent (a rank cannot)."""
    import json

    from harness.launcher import TRACE_ENV

    trace = tmp_path / "launches.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    launch(rankfns.echo, world_size=2, args=(1,))
    with pytest.raises(RankFailure):
        launch(rankfns.raise_on_rank, world_size=2, args=(1, 0.0))
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["fn"], r["ranks"], r["transport"], r["outcome"]) for r in records] == [
        ("echo", 2, "in-rank", "ok"), ("raise_on_rank", 2, "in-rank", "RankFailure")]
    assert all(r["wall_s"] > 0 and "test_a_launch_trace" in r["test"] for r in records)
