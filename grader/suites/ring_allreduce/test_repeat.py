"""100 all-reduces in a row on 3 ranks (hidden suite): no state leaks from call to call."""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.ring_allreduce._cases import OPS, P2P_ONLY, TIMEOUT_S, TRANSPORT, make_input
from grader.suites.ring_allreduce._ranks import repeated_all_reduce
from grader.suites.ring_allreduce._ref import reference

WORLD_SIZE, CALLS, NUMEL = 3, 100, 37


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(2)
def test_hundred_calls_in_a_row(launch):
    gen = seeded_generator(3000)
    ops = [OPS[i % len(OPS)] for i in range(CALLS)]
    inputs = [torch.stack([make_input(gen, (NUMEL,), torch.float32, op) for op in ops])
              for _ in range(WORLD_SIZE)]
    result = launch(repeated_all_reduce, WORLD_SIZE, args=(ops,),
                    rank_args=[(x,) for x in inputs], forbid=P2P_ONLY,
                    transport=TRANSPORT, timeout=TIMEOUT_S)
    for call, op in enumerate(ops):
        expected = reference(op, [x[call] for x in inputs])
        for rank, got in enumerate(result.values):
            assert_close(got[call], expected, what=f"[rank {rank} of {WORLD_SIZE}] call "
                         f"{call + 1} of {CALLS} in a row (op={op!r})",
                         hint="state left over from an earlier call? (buffers, counters)")
