"""FlopCounter and forward_backward_flops against torch's FlopCounterMode, run here (24 points).

One launch runs every case: the suite's own forward and backward under two `FlopCounter`s
(cases judged per op family), and `forward_backward_flops` on three small models. The
reference is `torch.utils.flop_counter.FlopCounterMode` on the same programs and tensors.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.compare import assert_close
from grader.suites.framework._cases import flop_cases
from grader.suites.framework._ranks import rank_flops
from grader.suites.framework._ref import flops_ref
from harness.case_tests import CaseTests
from harness.cases import case_value

MM_HINT = "mm of [m, k] @ [k, n] is 2*m*n*k FLOPs: a multiply-add is 2 FLOPs"
ADDMM_HINT = ("addmm is 2*m*n*k FLOPs of its two matrices (a multiply-add is 2 FLOPs); the bias "
              "is free")
BMM_HINT = "bmm of [B, m, k] @ [B, k, n] is 2*B*m*n*k FLOPs: count every batch"
BADDBMM_HINT = "baddbmm is 2*B*m*n*k FLOPs: count every batch; the bias is free"
CONV_HINT = "convolution is 2*N*prod(out_spatial)*C_out*w.shape[1]*prod(kernel)"
CONV_BACKWARD_HINT = ("convolution_backward counts the forward's FLOPs once per true output_mask "
                      "entry (grad_input, grad_weight)")
HINTS = {"aten.mm": MM_HINT, "aten.addmm": ADDMM_HINT, "aten.bmm": BMM_HINT,
         "aten.baddbmm": BADDBMM_HINT, "aten.convolution": CONV_HINT,
         "aten.convolution_backward": CONV_BACKWARD_HINT}
BACKWARD_EMPTY = ("the backward counted nothing: call out.backward(...) while a FlopCounter is "
                  "active (README §2)")
EXTRA_OP = "counts an operator README §2 does not count"


def _judge_counts(got: Any, want: dict[str, int], what: str) -> None:
    """First line: the operator whose count differs, expected vs got, and the formula."""
    assert isinstance(got, dict), f"{what}: flops must be a dict {{op name: int}}, got {got!r:.80}"
    if want and not got and what.endswith("backward"):
        pytest.fail(f"{what}: {BACKWARD_EMPTY}; expected {want}")
    for op, n in sorted(want.items()):
        have = got.get(op, 0)
        assert have == n and isinstance(have, int), (
            f"{what}: {op} counted {have!r} FLOPs, expected {n}; {HINTS.get(op, '')}")
    extra = sorted(set(got) - set(want))
    assert not extra, f"{what}: {EXTRA_OP}: {extra} (only {sorted(HINTS)} are counted)"


def run(launch: Any) -> tuple[dict, dict]:
    cases = flop_cases()
    outcomes = launch(rank_flops, world_size=1, args=(cases,), timeout=60.0).values[0]
    return cases, outcomes


def judge(results: tuple[dict, dict], key: str, phase: str) -> None:
    cases, outcomes = results
    for name, case in cases.items():
        if not name.startswith(key):
            continue
        ref = flops_ref(case)
        if case["via"] == "forward_backward_flops":
            got = case_value(outcomes[name], f"forward_backward_flops on {name}")
            counts = got["counts"] if isinstance(got, dict) else None
            assert isinstance(counts, dict) and set(counts) >= {"forward", "backward"}, (
                f"forward_backward_flops must return {{'forward': ..., 'backward': ...}}, "
                f"got {counts!r:.80}")
            for part in ("forward", "backward"):
                _judge_counts(counts[part], ref[part], f"forward_backward_flops {part}")
            for i, (grad, wanted) in enumerate(zip(got["grads"], case["grads"], strict=True)):
                assert grad is not None or not wanted, (
                    f"forward_backward_flops did not run the backward (input {i} has no .grad) "
                    f"on {name}")
            continue
        got = case_value(outcomes[name], f"FlopCounter on {name}")
        if phase == "values":
            if name.startswith("uncounted"):
                _judge_counts(got["forward"], ref["forward"], "FlopCounter forward")
                _judge_counts(got["backward"], ref["backward"], "FlopCounter backward")
            assert_close(got["out"], ref["out"], dtype=torch.float32,
                         what=f"output computed under FlopCounter ({name})",
                         hint="the mode must return func(*args, **kwargs) unchanged, run once",
                         hint_first=True)
            continue
        _judge_counts(got[phase], ref[phase], f"FlopCounter {phase}")


def exercises(keys: Any) -> list[str]:
    return ["forward_backward_flops" if key == "model" else "FlopCounter" for key in keys]


FLOPS = CaseTests(run=run, judge=lambda results, key, phase="forward": judge(results, key, phase),
                  exercises=exercises)
case_runs = FLOPS.fixture
test_mm_and_addmm_forward = FLOPS.test(4, "mm", "addmm", phase="forward")
test_bmm_and_baddbmm_forward = FLOPS.test(4, "bmm", phase="forward")
test_convolution_forward = FLOPS.test(3, "conv", phase="forward")
test_backward_ops_with_conv_output_mask = FLOPS.test(5, "mm", "addmm", "bmm", "conv",
                                                     phase="backward")
test_forward_backward_flops_on_models = FLOPS.test(6, "model")
test_uncounted_ops_absent_values_unchanged = FLOPS.test(2, "uncounted", "mm", "bmm", "conv",
                                                        phase="values")
