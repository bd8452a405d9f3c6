"""Bad input: a clear ValueError, as each docstring promises (README §8)."""

from __future__ import annotations

import pytest

from grader.suites.moe._cases import run, values


def _check(launch, impl, what: str, function: str) -> None:
    got = values(run(launch, impl, 2), f"invalid {what}")[0]
    for case, outcome in got.items():
        if case.startswith("accepted"):
            assert outcome == "no error", f"{function} with {case}: valid, but raised {outcome}"
            continue
        assert outcome == "ValueError", (
            f"{function} with {case}: expected a ValueError naming the problem, got {outcome}")


@pytest.mark.exercises("route")
@pytest.mark.points(1)
def test_route_rejects_bad_k(launch, impl):
    _check(launch, impl, "route", "route")


@pytest.mark.exercises("expert_capacity")
@pytest.mark.points(1)
def test_capacity_rejects_bad_factor(launch, impl):
    _check(launch, impl, "capacity", "expert_capacity")


@pytest.mark.exercises("all_to_all_tokens")
@pytest.mark.points(1)
def test_all_to_all_rejects_bad_splits(launch, impl):
    _check(launch, impl, "all_to_all", "all_to_all_tokens")


@pytest.mark.exercises("MoELayer")
@pytest.mark.points(1)
def test_layer_rejects_bad_sizes(launch, impl):
    _check(launch, impl, "layer", "MoELayer")
