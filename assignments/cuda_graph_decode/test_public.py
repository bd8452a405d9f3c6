"""Public tests of cuda_graph_decode (20 points): run `pytest assignments/cuda_graph_decode`.

One rank builds the provided model (float64, seed 0), decodes two steps of every row eagerly,
captures your GraphedDecoder with the graph emulator (buckets 1, 2, 4, 8) and runs 7 steps of
batch sizes 1 to 10 over random rows. This process runs the same model eagerly and compares
logits, the KV cache, and what `harness.graphs.watch()` counted. The hidden suite does the
same over more schedules, 100 steps, custom buckets, more bad inputs and, on a GPU, real CUDA
graphs and speed (README §7).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from assignments.cuda_graph_decode.model import DecoderConfig, build_model
from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import case_value

CONFIG = {"vocab_size": 50, "hidden": 32, "num_layers": 2, "num_heads": 4, "max_batch": 12,
          "max_len": 16}
SIZES = [1, 3, 8, 5, 2, 10, 3]
BUCKETS = [1, 2, 4, 8]
Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def make_steps(sizes: list[int], lengths: list[int], seed: int) -> list[Step]:
    """(tokens, positions, rows) per step; each chosen row decodes at its next free position."""
    gen = seeded_generator(seed)
    steps = []
    for size in sizes:
        rows = torch.randperm(len(lengths), generator=gen)[:size]
        positions = torch.tensor([lengths[r] for r in rows.tolist()])
        tokens = torch.randint(0, CONFIG["vocab_size"], (size,), generator=gen)
        for r in rows.tolist():
            lengths[r] += 1
        steps.append((tokens, positions, rows))
    return steps


LENGTHS = [0] * CONFIG["max_batch"]
HISTORY = make_steps([CONFIG["max_batch"]] * 2, LENGTHS, seed=1)
STEPS = make_steps(SIZES, LENGTHS, seed=2)


def rank_public(ctx, config: dict, history: list[Step], steps: list[Step]) -> dict[str, Any]:
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model
    from harness import graphs
    from harness.cases import capture, run_cases

    runner = ctx.impl_module("cuda_graph_decode", "runner")
    model = build_model(DecoderConfig(**config), dtype=torch.float64)
    for step in history:
        model.decode(*step)
    decoder = runner.GraphedDecoder(model, 8, make_graph=graphs.EmulatedGraph)
    max_len = config["max_len"]
    before = (model.k_cache[:, :, :max_len].clone(), model.v_cache[:, :, :max_len].clone())
    with graphs.watch() as w:
        decoder.capture()
    captures = w.captures
    capture_change = max(float((model.k_cache[:, :, :max_len] - before[0]).abs().max()),
                         float((model.v_cache[:, :, :max_len] - before[1]).abs().max()))
    logits, copies, counts, errors = [], [], [], []
    for step in steps:
        with graphs.watch() as w:
            outcome = capture(decoder.step, *step)  # its own error scope: a crash is reported
        out = outcome.get("value")                  # with its step
        logits.append(out)
        copies.append(out.clone() if isinstance(out, torch.Tensor) else out)
        counts.append({"captures": w.captures, "replays": w.replays})
        errors.append(None if outcome["ok"] else outcome)
    bad_inputs = {
        "an empty batch": ([], [], []),
        "tokens and rows of different lengths": ([1, 2], [0, 0], [0]),
        "a position equal to max_len": ([1], [config["max_len"]], [0]),
    }
    # Each bad input in its own error scope: the exception it raises is the answer.
    bad = run_cases(ctx, [(name, lambda i=inputs: decoder.step(
        *(torch.tensor(x, dtype=torch.long) for x in i))) for name, inputs in bad_inputs.items()])
    return {"buckets": list(decoder.buckets), "captures": captures,
            "capture_change": capture_change, "errors": errors,
            "logits": logits, "copies": copies, "counts": counts, "bad": bad,
            "k_cache": model.k_cache[:, :, :max_len], "v_cache": model.v_cache[:, :, :max_len]}


def rank_picks(ctx, sizes: list[int], buckets: list[int]) -> list:
    runner = ctx.impl_module("cuda_graph_decode", "runner")
    return [runner.pick_bucket(n, buckets) for n in sizes]


@pytest.fixture(scope="module")
def run(launch) -> dict[str, Any]:
    return launch(rank_public, world_size=1, args=(CONFIG, HISTORY, STEPS), timeout=120).values[0]


@pytest.fixture(scope="module")
def eager() -> dict[str, Any]:
    model = build_model(DecoderConfig(**CONFIG), dtype=torch.float64)
    for step in HISTORY:
        model.decode(*step)
    logits = [model.decode(*step) for step in STEPS]
    max_len = CONFIG["max_len"]
    return {"logits": logits, "k_cache": model.k_cache[:, :, :max_len],
            "v_cache": model.v_cache[:, :, :max_len]}


@pytest.mark.exercises("pick_bucket")
@pytest.mark.points(3)
def test_pick_bucket(launch):
    sizes, expected = (1, 3, 4, 5, 8, 9), [1, 4, 4, 8, 8, None]
    picks = launch(rank_picks, world_size=1, args=(sizes, BUCKETS), timeout=60).values[0]
    for n, got, want in zip(sizes, picks, expected):
        assert got == want, (f"pick_bucket({n}, [1, 2, 4, 8]) returned {got!r}, expected "
                             f"{want!r}: the smallest bucket >= batch_size, None above all")


def steps_ran(run: dict[str, Any]) -> None:
    """Raise the first step that raised, named with its batch size."""
    for i, (size, error) in enumerate(zip(SIZES, run["errors"])):
        if error is not None:
            above = "; above the largest bucket, run model.decode eagerly" if size > 8 else ""
            case_value(error, f"step {i + 1} (batch of {size}{above})")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(6)
def test_logits_match_eager(run, eager):
    steps_ran(run)
    if run["capture_change"] != 0.0:
        raise AssertionError(
            f"capture() changed real slots of the KV cache by up to {run['capture_change']:.3g}: "
            f"warm up and capture on pad entries (position model.pad_position), which write "
            f"only the pad slot")
    for i, size in enumerate(SIZES):
        got, want = tuple(run["logits"][i].shape), tuple(eager["logits"][i].shape)
        assert got == want, (f"step {i + 1} (batch of {size}) returned logits of shape {got}, "
                             f"expected {want}: return only the batch's rows of the bucket")
        try:
            assert_close(run["logits"][i], eager["logits"][i],
                         what=f"logits of step {i + 1} (batch of {size})")
        except AssertionError as exc:
            if torch.allclose(run["copies"][i], eager["logits"][i]):
                raise AssertionError(
                    f"the logits returned by step {i + 1} were right, then changed during "
                    f"later steps: return a copy (clone) of the static output") from None
            raise AssertionError(
                f"step {i + 1} (batch of {size}): logits differ from eager; check that inputs "
                f"are copy_-ed into the captured buffers and that pad slots use position "
                f"model.pad_position, then replay the bucket's graph ({exc})") from None


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(3)
def test_kv_cache_matches_eager(run, eager):
    steps_ran(run)
    for name in ("k_cache", "v_cache"):
        assert_close(run[name], eager[name], what=f"{name} (real slots) after the last step",
                     hint="padded entries must use position model.pad_position, which writes "
                          "only the pad slot")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(4)
def test_captures_once_per_bucket_and_replays_once_per_step(run):
    steps_ran(run)
    assert run["buckets"] == BUCKETS, f"default buckets for 8: {run['buckets']}, expected {BUCKETS}"
    assert run["captures"] == len(BUCKETS), \
        f"capture() made {run['captures']} graphs, expected one per bucket ({len(BUCKETS)})"
    for i, (size, count) in enumerate(zip(SIZES, run["counts"])):
        assert count["captures"] == 0, f"step {i + 1} captured a graph; step() must only replay"
        want = 1 if size <= max(BUCKETS) else 0
        assert count["replays"] == want, (
            f"step {i + 1} (batch of {size}) replayed {count['replays']} times, expected {want} "
            f"({'one replay' if want else 'eager model.decode above the largest bucket'})")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(2)
def test_returned_logits_are_not_overwritten(run):
    steps_ran(run)
    for i, (kept, copy) in enumerate(zip(run["logits"], run["copies"])):
        assert torch.equal(kept, copy), (
            f"the logits returned by step {i + 1} changed during later steps; return a copy "
            f"(clone) of the static output, not a view of it")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(2)
def test_bad_input_raises_value_error(run):
    for name, outcome in run["bad"].items():
        error = outcome.get("error") or {}
        if error.get("not_implemented"):
            case_value(outcome, f"step() with {name}")  # raises: "not implemented yet: ..."
        got = "no error" if outcome["ok"] else error.get("type")
        assert got == "ValueError", f"step() with {name}: expected ValueError, got {got}"
