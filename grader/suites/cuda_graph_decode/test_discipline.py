"""Discipline: capture once per bucket (largest first, each after an eager warm-up), replay once
per step, allocate nothing, hand out copies.

100 steps of batch sizes 1 to 10 (buckets 1, 2, 4, 8; 10 runs eagerly) under
`harness.graphs.watch()`, which counts captures, replays and the tensors aten ops allocate
outside replays. A replayed step may allocate one floating-point tensor: the logits it returns.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.suites.cuda_graph_decode._cases import CONFIG, make_spec, sizes_of
from grader.suites.cuda_graph_decode._ranks import rank_decode
from grader.suites.cuda_graph_decode._ref import (
    assert_step_logits,
    capture_order_problem,
    reference,
)

HUNDRED = make_spec([1, 3, 8, 2, 5, 10, 4, 7] * 12 + [6, 1, 2, 8], seed=11, history_steps=1,
                    config={"max_len": 64})


@pytest.fixture(scope="module")
def hundred(launch) -> tuple[dict, dict]:
    return HUNDRED, launch(rank_decode, world_size=1, args=(HUNDRED,), timeout=180).values[0]


def _graphed(spec: dict, run: dict) -> list[int]:
    largest = max(run["buckets"])
    return [i for i, size in enumerate(sizes_of(spec)) if size <= largest]


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(3)
def test_one_capture_per_bucket(hundred):
    _, run = hundred
    assert run["captures"] == len(run["buckets"]), (
        f"capture() captured {run['captures']} graphs for {len(run['buckets'])} buckets; "
        f"capture each bucket exactly once")
    problem = capture_order_problem(run)
    assert not problem, problem


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(4)
def test_no_capture_during_100_steps(hundred):
    spec, run = hundred
    counts = [step["captures"] for step in run["per_step"]]
    assert sum(counts) == 0, (
        f"step() captured {sum(counts)} graphs over {len(counts)} steps (first in step "
        f"{next(i for i, c in enumerate(counts) if c) + 1}); capture() once, then only replay")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(3)
def test_one_replay_per_graphed_step_none_above(hundred):
    spec, run = hundred
    graphed = set(_graphed(spec, run))
    for i, step in enumerate(run["per_step"]):
        want = 1 if i in graphed else 0
        assert step["replays"] == want, (
            f"step {i + 1} (batch of {sizes_of(spec)[i]}, buckets {run['buckets']}) replayed "
            f"{step['replays']} times, expected {want}: one replay of the bucket's graph, or "
            f"an eager model.decode above the largest bucket")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(4)
def test_replayed_steps_allocate_only_the_result(hundred):
    spec, run = hundred
    for i in _graphed(spec, run):
        allocated = run["per_step"][i]["float_allocations"]
        assert len(allocated) <= 1, (
            f"step {i + 1} (batch of {sizes_of(spec)[i]}) allocated {len(allocated)} "
            f"floating-point tensors (ops: {', '.join(sorted(set(allocated)))}); a replayed "
            f"step computes inside the graph and allocates only the returned copy")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_hundred_steps_match_eager(hundred):
    spec, run = hundred
    ref = reference(spec)
    for i in range(len(spec["steps"])):
        assert_step_logits(run, ref, spec, i)


def rank_reuse(ctx, config: dict) -> dict[str, Any]:
    """Keep one step's result across later steps of the same bucket; capture() twice."""
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model
    from harness import graphs

    runner = ctx.impl_module("cuda_graph_decode", "runner")
    model = build_model(DecoderConfig(**config), dtype=torch.float64)
    decoder = runner.GraphedDecoder(model, 4, make_graph=graphs.EmulatedGraph)
    with graphs.watch() as w:
        decoder.capture()
        decoder.capture()
    first = decoder.step(torch.tensor([5, 6, 7]), torch.tensor([0, 0, 0]),
                         torch.tensor([0, 1, 2]))
    kept = first.clone()
    decoder.step(torch.tensor([8, 9, 10]), torch.tensor([1, 1, 1]), torch.tensor([0, 1, 2]))
    decoder.step(torch.tensor([11, 12, 13, 14]), torch.tensor([2, 2, 2, 0]),
                 torch.tensor([0, 1, 2, 3]))
    return {"captures": w.captures, "buckets": len(decoder.buckets), "first": first,
            "kept": kept}


@pytest.fixture(scope="module")
def reuse(launch) -> dict[str, Any]:
    return launch(rank_reuse, world_size=1, args=(CONFIG,), timeout=60).values[0]


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(3)
def test_result_survives_the_next_steps(reuse):
    change = float((reuse["first"] - reuse["kept"]).abs().max())
    assert change == 0.0, (
        f"the tensor returned by step() changed by up to {change:.3g} when later steps ran; "
        f"return a copy (clone) of the static output, not a view of it")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_second_capture_call_captures_nothing(reuse):
    assert reuse["captures"] == reuse["buckets"], (
        f"capture() called twice captured {reuse['captures']} graphs for {reuse['buckets']} "
        f"buckets; a second call must do nothing")
