"""Part 2, checkpoints with DCP: 4 ranks train 2 AdamW steps, save, train 2 more; 2 ranks load
that checkpoint into a model built with other weights and train the same 2 steps on the same
global batch (in-rank transport; see _ranks_checkpoint.py for how the files travel).

Round trip: the local shards of every parameter and of AdamW's state, put together in the
parent, are bit-identical after the load on 2 ranks to what the 4 ranks saved. Resume: the
2-rank run ends where the 4-rank run ends (float32 tolerance: the reduction order differs).
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close, steps_bound
from grader.suites.fsdp._cases import case2, case4, ckpt4, joined
from grader.suites.fsdp._ranks_checkpoint import STEPS
from harness.cases import where

RESUME_TOL = steps_bound(torch.float32, steps=2, depth_per_step=256).scaled(8)
FINAL_TOL = steps_bound(torch.float32, steps=STEPS, depth_per_step=256).scaled(8)


@pytest.mark.points(2)
@pytest.mark.exercises("shard_model", "save_checkpoint")
def test_every_rank_writes_its_own_shards(launch, impl):
    saved = case4(launch, impl, "save")
    assert ".metadata" in saved[0]["files"], (
        f"[rank 0 of 4] wrote {sorted(saved[0]['files'])}; DCP's rank 0 writes .metadata")
    for rank, value in enumerate(saved):
        data = [n for n in value["files"] if n != ".metadata"]
        assert data and all(value["files"][n].numel() > 0 for n in data), (
            f"{where(rank, 4)} wrote no shard file ({sorted(value['files'])}); every rank must "
            f"save its own shards (dcp.save on every rank), not only rank 0")


@pytest.mark.points(5)
@pytest.mark.exercises("shard_model", "save_checkpoint", "load_checkpoint")
def test_round_trip_is_bit_exact_across_world_sizes(launch, impl):
    saved, loaded = case4(launch, impl, "save"), case2(launch, impl, "load")
    for name in saved[0]["params"]:
        before = joined([v["params"] for v in saved], name)
        after = joined([v["params"] for v in loaded], name)
        assert torch.equal(before, after), (
            f"{name} after load_checkpoint on 2 ranks differs from what 4 ranks saved (max "
            f"|Δ| {float((before - after).abs().max()):.3g}); did every rank save its shards?")
        for key in ("exp_avg", "exp_avg_sq"):
            before = joined([v["state"][name] for v in saved], key)
            after = joined([v["state"][name] for v in loaded], key)
            assert before.shape == after.shape and torch.equal(before, after), (
                f"AdamW {key} of {name} not restored bit for bit: save and load the optimizer "
                f"through get_state_dict / set_state_dict")
        steps = {float(v["state"][name]["step"]) for v in loaded}
        assert steps == {2.0}, f"AdamW step of {name} after load: {steps}, expected 2"


@pytest.mark.points(6)
@pytest.mark.exercises("shard_model", "save_checkpoint", "load_checkpoint")
def test_resume_on_two_ranks_equals_continuing_on_four(launch, impl):
    four, two = case4(launch, impl, "more steps"), case2(launch, impl, "more steps")
    for name in four[0]:
        assert_close(joined(two, name), joined(four, name), dtype=torch.float32, tol=RESUME_TOL,
                     what=f"{name} after 2 steps resumed on 2 ranks vs continued on 4",
                     hint="restore the optimizer state too (AdamW's moments and step)")


@pytest.mark.points(3)
@pytest.mark.exercises("shard_model", "full_state_dict")
def test_full_state_dict_on_rank0_equals_single_process(launch, impl):
    got = case4(launch, impl, "final state")
    _, refs = ckpt4(launch, impl)
    final = refs["final"]
    assert sorted(got[0]) == sorted(final), (
        f"[rank 0 of 4] full_state_dict keys {sorted(got[0])[:3]}..., expected the model's "
        f"state_dict names {sorted(final)[:3]}...")
    for name, expected in final.items():
        value = got[0][name]
        assert type(value) is torch.Tensor and tuple(value.shape) == tuple(expected.shape), (
            f"[rank 0 of 4] {name}: {type(value).__name__} {tuple(value.shape)}; expected a "
            f"plain full tensor {tuple(expected.shape)} (full_state_dict=True, cpu_offload)")
        assert_close(value, expected, dtype=torch.float32, tol=FINAL_TOL,
                     what=f"[rank 0 of 4] {name} after {STEPS} AdamW steps")
    for rank in range(1, 4):
        assert got[rank] == {}, (
            f"{where(rank, 4)} full_state_dict returned {len(got[rank])} entries; only rank 0 "
            f"gets the full state dict, the others an empty dict")
