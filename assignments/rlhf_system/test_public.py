"""Public tests of rlhf_system (20 of 100 points).

Run them with `pytest assignments/rlhf_system`.

TODO(grader new): small cases that teach; messages that name the fix.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close


def rank_example(ctx, x):
    return ctx.impl_module("rlhf_system", "rlhf").example(x)


@pytest.mark.points(20)
@pytest.mark.exercises("example")
def test_example_doubles_a_small_tensor(launch):
    x = torch.arange(6, dtype=torch.float32)
    got = launch(rank_example, world_size=1, args=(x,)).values[0]
    assert_close(got, x.double() * 2, dtype=torch.float32, what="example(x)",
                 hint="return x times 2, a new tensor", hint_first=True)
