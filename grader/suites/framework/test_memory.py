"""saved_tensor_bytes, checkpoint and swiglu (24 points), one launch.

Bytes: `saved_tensor_bytes` against README §3.1's definition run here; what `checkpoint` and
`swiglu` save is measured by the suite's own saved-tensor hooks around them in the rank and
judged here against the inputs' bytes. Values and gradients against float64 autograd here.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.framework._cases import memory_cases
from grader.suites.framework._ranks import rank_memory
from grader.suites.framework._ref import checkpoint_ref, saved_bytes_ref, storage_bytes, swiglu_ref
from harness.case_tests import CaseTests
from harness.cases import case_value

SAVED_HINT = ("count t.untyped_storage().nbytes() once per distinct storage packed by "
              "saved_tensors_hooks during fn(*inputs)")
CHECKPOINT_SAVES_TOO_MUCH = ("checkpoint saved intermediates: save only the inputs and run fn "
                             "under torch.no_grad() in forward, recompute in backward")
SWIGLU_SAVES_TOO_MUCH = ("swiglu saved more than gate and up: use an autograd.Function that "
                         "saves only its two inputs")
GATE_HINT = "d gate = grad * up * s * (1 + gate * (1 - s)), s = sigmoid(gate)"
UP_HINT = "d up = grad * silu(gate)"


def run(launch: Any) -> tuple[dict, dict]:
    cases = memory_cases()
    outcomes = launch(rank_memory, world_size=1, args=(cases,), timeout=60.0).values[0]
    return cases, outcomes


def _judge_saved(case: dict, got: Any, name: str) -> None:
    want = saved_bytes_ref(case)
    assert isinstance(got, int) and got == want, (
        f"saved_tensor_bytes: {got!r} bytes, expected {want}; {SAVED_HINT} ({name})")


def _judge_grads(got: list, want: list, grads: list[bool], what: str, dtype: torch.dtype,
                 hints: tuple[str, ...] = ()) -> None:
    for i, (g, w, needed) in enumerate(zip(got, want, grads, strict=True)):
        if not needed or w is None:
            reason = "does not require grad" if not needed else "is not used by fn"
            assert g is None, f"{what}: input {i} {reason} but got a gradient"
            continue
        assert g is not None, f"{what}: input {i} requires grad but got no gradient"
        assert_close(g, w, dtype=dtype, what=f"{what}, gradient of input {i}",
                     hint=hints[i] if i < len(hints) else "", hint_first=bool(hints))


def judge(results: tuple[dict, dict], key: str, aspect: str = "values") -> None:
    cases, outcomes = results
    for name, case in cases.items():
        if not name.startswith(key):
            continue
        got = case_value(outcomes[name], f"{key} on {name}")
        if case["run"] == "saved":
            _judge_saved(case, got, name)
        elif case["run"] == "gradcheck":
            assert got["ok"] is True, (f"swiglu fails torch.autograd.gradcheck in float64 "
                                       f"({name}): {GATE_HINT}; {UP_HINT}")
        elif aspect == "saved":
            limit = storage_bytes(case["tensors"])
            message = CHECKPOINT_SAVES_TOO_MUCH if key == "checkpoint" else SWIGLU_SAVES_TOO_MUCH
            assert got["saved"] <= limit, (
                f"{message} ({got['saved']} bytes saved, the inputs hold {limit}; {name})")
        elif case["run"] == "checkpoint":
            ref = checkpoint_ref(case)
            assert got["inputs_unchanged"], f"checkpoint changed its inputs in place ({name})"
            assert_close(got["out"], ref["out"], dtype=torch.float32,
                         what=f"checkpoint output ({name})", hint="return fn(*inputs)",
                         hint_first=True)
            _judge_grads(got["grads"], ref["grads"], case["grads"], f"checkpoint ({name})",
                         torch.float32)
        else:
            ref = swiglu_ref(case)
            dtype = case["tensors"][0].dtype
            assert_close(got["out"], ref["out"], dtype=dtype, what=f"swiglu output ({name})",
                         hint="silu(gate) * up", hint_first=True)
            _judge_grads(got["grads"], ref["grads"], case["grads"], f"swiglu ({name})", dtype,
                         hints=(GATE_HINT, UP_HINT))


def exercises(keys: Any) -> list[str]:
    names = {"saved": "saved_tensor_bytes", "checkpoint": "checkpoint", "swiglu": "swiglu",
             "gradcheck": "swiglu"}
    return [names[key.split("-")[0]] for key in keys]


MEMORY = CaseTests(run=run, judge=judge, exercises=exercises)
case_runs = MEMORY.fixture
test_saved_tensor_bytes_views_twice_parameters = MEMORY.test(6, "saved")
test_checkpoint_gradients_equal_autograd = MEMORY.test(5, "checkpoint-mlp")
test_checkpoint_saves_at_most_its_inputs = MEMORY.test(4, "checkpoint", aspect="saved")
test_checkpoint_input_without_grad = MEMORY.test(1, "checkpoint-input-without-grad")
test_swiglu_values_and_gradients = MEMORY.test(3, "swiglu")
test_swiglu_passes_gradcheck_float64 = MEMORY.test(2, "gradcheck")
test_swiglu_saves_at_most_gate_and_up = MEMORY.test(3, "swiglu", aspect="saved")
