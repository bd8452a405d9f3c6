"""Stretch (README §7): ring attention's backward. The gradients of q, k and v that reach each
rank's shards equal the matching slices of full attention's gradients (float64, causal and not,
2, 3 and 4 ranks). Values only: the backward's messages are not graded.
"""

from __future__ import annotations

import pytest

from grader.suites.context_parallel._cases import LAUNCHES, expected, run, values
from grader.suites.context_parallel._ref import check
from harness.cases import where

pytestmark = pytest.mark.exercises("ring_attention")

BACKWARD_HINT = ("stretch: ring_attention's backward must send K/V and their gradient "
                 "accumulators around the ring (an autograd Function); local autograd misses "
                 "the other ranks' contributions")


@pytest.mark.points(2)
@pytest.mark.parametrize(("which", "name"), [
    pytest.param("ring2", "ring backward", id="stretch-world_size=2"),
    pytest.param("ring2", "ring backward causal", id="stretch-world_size=2-causal"),
    pytest.param("ring3", "ring backward causal", id="stretch-world_size=3-causal"),
    pytest.param("ring4", "ring backward causal", id="stretch-world_size=4-causal"),
])
def test_ring_backward_gradients(launch, impl, which, name):
    world = LAUNCHES[which][0]
    got = values(run(launch, impl, which), name)
    want = expected(which, name)
    for r in range(world):
        check(got[r]["out"], want["out"][r], f"{where(r, world)} ring_attention ({name}) out",
              tol=want["tol"])
        for part in ("q_grad", "k_grad", "v_grad"):
            if got[r][part] is None:
                raise AssertionError(f"{where(r, world)} ring_attention ({name}): "
                                     f"{part[0]} got no gradient; {BACKWARD_HINT}")
            check(got[r][part], want[part][r],
                  f"{where(r, world)} ring_attention ({name}) gradient of {part[0]}",
                  tol=want["grad_tol"], hint=BACKWARD_HINT)
