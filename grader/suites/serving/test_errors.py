"""Bad limits and requests raise ValueError, boundary cases do not (README §3); RadixCache's
documented errors; Engine's defaults; sample follows its documented rule."""

from __future__ import annotations

import pytest

from grader.suites.serving._cases import ERROR_CALLS, JOBS, jobs_result, value
from grader.suites.serving._ref import ref_sample


@pytest.fixture(scope="module")
def results(launch, impl):
    return jobs_result(launch, impl)


@pytest.mark.points(2)
@pytest.mark.exercises("sample")
def test_sample_rule(results):
    got = value(results, "sample", "sample(logits, request)")
    for k, (logits, spec, index) in enumerate(JOBS["sample"]["calls"]):
        want = ref_sample(logits, spec["temperature"], spec["seed"], index)
        if got[k] != want:
            raise AssertionError(
                f"sample call {k} (temperature {spec['temperature']}): got token {got[k]}, "
                f"expected {want}: greedy is argmax; sampled draws once with a generator "
                "seeded request.seed * 4096 + len(request.output)")


@pytest.mark.points(1)
@pytest.mark.exercises("Scheduler", "Engine", "RadixCache")
def test_bad_limits_and_requests_raise_value_error(results):
    got = value(results, "errors", "Scheduler / Engine with bad input")
    for (_, label, want), outcome in zip(ERROR_CALLS, got, strict=True):
        if outcome != want:
            expected = "no error" if want == "ok" else want
            raise AssertionError(f"{label}: expected {expected}, got "
                                 f"{'no error' if outcome == 'ok' else outcome}")
