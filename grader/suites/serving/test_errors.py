"""Bad limits and requests raise ValueError (README §3); sample follows its documented rule."""

from __future__ import annotations

import pytest

from grader.suites.serving._common import ref_sample, value
from grader.suites.serving._jobs import JOBS, jobs_result


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
@pytest.mark.exercises("Scheduler", "Engine")
def test_bad_limits_and_requests_raise_value_error(results):
    got = value(results, "errors", "Scheduler / Engine with bad input")
    what = ["max_num_seqs > max_num_tokens", "max_num_seqs = 0",
            "Engine with max_num_seqs > max_num_tokens", "an empty prompt", "max_tokens = 0",
            "a request larger than the whole pool", "a request id added twice"]
    for label, outcome in zip(what, got, strict=True):
        if outcome != "ValueError":
            raise AssertionError(f"{label}: expected ValueError, got {outcome}")
