"""`python -m grader gpu-check`: the plan covers every assignment, a CPU machine says "not
run" and exits 0, steps are time-boxed and budgeted, verdicts and reports are right.

The check itself needs a GPU; here its machinery runs with a fake step runner, and the plan
is dry-run as `make test` does, so it cannot rot while no GPU is there.
"""

from __future__ import annotations

import json

import pytest
import torch

import grader.cli as cli
from grader.instructor import gpu_check
from grader.instructor.gpu_check import Step, StepResult, build_plan, judge_grade, run_plan
from grader.manifest import REPO_ROOT, load_manifest


def test_the_dry_run_lists_the_solution_and_the_stub_of_every_assignment(capsys):
    assert cli.main(["gpu-check", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for assignment_id in load_manifest().ids:
        assert f"{assignment_id} solutions" in out and f"{assignment_id} stub" in out
    assert "project @pytest.mark.gpu tests" in out and "NCCL" in out
    assert out.rstrip().endswith("dry run: nothing run")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_says_not_run_and_exits_0(capsys, tmp_path):
    assert cli.main(["gpu-check", "--out", str(tmp_path)]) == 0
    assert "not run: no CUDA device" in capsys.readouterr().out
    assert not list(tmp_path.iterdir()), "nothing is written when nothing ran"


def test_gpu_tests_are_found_in_every_suite_that_has_them():
    found = {a: gpu_check.gpu_tests_of(REPO_ROOT, a) for a in load_manifest().ids}
    assert "test_graphed_decode_speedup_at_batch_1" in found["cuda_graph_decode"]
    assert "test_softmax_speed" in found["triton_kernels"]
    assert set(found["gpt"]) == {"test_bfloat16_attention_on_cuda",
                                 "test_bfloat16_rms_norm_on_cuda"}
    assert found["paged_kv"] == ("test_paged_attention_on_cuda",)
    assert found["ppo"] == ()


def test_solutions_that_time_speed_run_alone_and_the_rest_is_pooled():
    plan = build_plan(load_manifest(), REPO_ROOT)
    alone = {s.name for s in plan if s.alone}
    assert {"cuda_graph_decode solutions", "triton_kernels solutions"} <= alone
    assert "cuda_graph_decode stub" not in alone and "ppo solutions" not in alone
    grade = [s for s in plan if s.kind == "grade"]
    assert all("--no-worksheets" in s.argv and "--timeout" in s.argv for s in grade)


def _result(step: Step, timeout: float) -> StepResult:
    return StepResult(step.name, step.kind, "ok", True, 0.0, step.assignment, step.impl)


def test_pooled_steps_run_first_then_the_timed_ones_in_plan_order():
    steps = [Step("grade", "a solutions", (), alone=True), Step("grade", "a stub", ()),
             Step("bench", "bench a", (), alone=True), Step("grade", "b stub", ())]
    order: list[str] = []

    def runner(step: Step, timeout: float) -> StepResult:
        order.append(step.name)
        return _result(step, timeout)

    results = run_plan(steps, workers=1, budget_s=60, step_timeout_s=10, runner=runner,
                       echo=lambda line: None)
    assert order == ["a stub", "b stub", "a solutions", "bench a"]
    assert [r.step for r in results] == [s.name for s in steps], "reported in plan order"


def test_a_step_after_the_budget_is_not_run_and_fails_the_check():
    steps = [Step("grade", f"s{i}", ()) for i in range(3)]
    results = run_plan(steps, workers=1, budget_s=0.0, step_timeout_s=10, runner=_result,
                       echo=lambda line: None)
    assert [r.status for r in results] == ["not run: budget"] * 3
    assert not any(r.ok for r in results)


def _document(*tests: tuple[str, float, float, bool]) -> dict:
    return {"tests": [{"name": f"x: {name}", "score": score, "max_score": 0 if excluded else top,
                       "output": "why", "extra_data": {
                           "outcome": "passed" if score == top else "failed", "points": top,
                           "not_graded_here": excluded, "part": "suite"}}
                      for name, score, top, excluded in tests]}


def test_a_solution_needs_every_point_with_nothing_left_ungraded():
    step = Step("grade", "x solutions", (), "x", "solutions", "full", ("test_gpu",))
    full = judge_grade(step, _document(("test_a", 3, 3, False), ("test_gpu", 2, 2, False)), 1.0)
    assert full.ok and full.gpu_tests == {"test_gpu": "passed"}
    skipped = judge_grade(step, _document(("test_a", 3, 3, False), ("test_gpu", 0, 2, True)),
                          1.0)
    assert not skipped.ok and skipped.excluded_points == 2
    assert skipped.gpu_tests == {"test_gpu": "not graded here"}
    lost = judge_grade(step, _document(("test_a", 1, 3, False)), 1.0)
    assert not lost.ok and lost.lost and lost.lost[0].startswith("test_a")


def test_a_stub_must_score_zero():
    step = Step("grade", "x stub", (), "x", "stub", "zero")
    assert judge_grade(step, _document(("test_a", 0, 3, False)), 1.0).ok
    assert not judge_grade(step, _document(("test_a", 1, 3, False)), 1.0).ok
    assert not judge_grade(step, {"tests": []}, 1.0).ok, "no test graded is no verdict"


def test_the_report_has_a_row_per_assignment_and_the_failures(tmp_path):
    sol = StepResult("x solutions", "grade", "FAIL", False, 2.0, "x", "solutions", 98, 100,
                     0, {"test_gpu": "failed"}, ["test_gpu: differs"])
    stub = StepResult("x stub", "grade", "ok", True, 1.0, "x", "stub", 0, 100)
    bench = StepResult("bench x", "bench", "ok", True, 3.0, "x", note="ratio 3.1x",
                       output_tail="| ratio | 3.1 |")
    md, js = gpu_check.write_reports(tmp_path, [sol, stub, bench], {"gpus": "H100"}, 6.0)
    text = md.read_text()
    assert "some steps disagree" in text and "**FAIL** 98/100" in text and "ok 0/100" in text
    assert "0/1 GPU tests passed (not: test_gpu)" in text and "test_gpu: differs" in text
    assert "| ratio | 3.1 |" in text and "| x | **FAIL** 98/100 | ok 0/100 |" in text
    results, facts, wall = gpu_check.load_results(js)
    assert [r.step for r in results] == ["x solutions", "x stub", "bench x"]
    assert gpu_check.render_markdown(results, facts, wall) + "\n" == text, "renders again"
    data = json.loads(js.read_text())
    assert data["ok"] is False and [s["step"] for s in data["steps"]] == [
        "x solutions", "x stub", "bench x"]
