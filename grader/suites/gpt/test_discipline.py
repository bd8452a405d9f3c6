"""Discipline (4 points): no F.scaled_dot_product_attention, nn.MultiheadAttention, F.rms_norm
or nn.RMSNorm anywhere in a float32 forward and backward — the fast path a student is tempted
to take. Every probe of this suite runs under the same watch (`_ranks.Watch`); here each
function has a test of its own, so the reason names it. A call whose error the code catches
still fails: the watch records it before raising. The verdict also rests on a check the rank
cannot reach: model.py's source, read here with `ast` (`_ref_checks.static_forbidden`), must not
name the forbidden functions (docstrings and comments aside)."""

from __future__ import annotations

import pytest

from grader.suites.gpt._cases import (
    F32,
    config_dict,
    gpt_probe,
    make_state,
    probe,
    randn,
    register,
    shared_probes,
    special,
)
from grader.suites.gpt._ref_checks import FORBIDDEN_HINT, result, static_forbidden

CONFIG = config_dict()
STATE = make_state(CONFIG, 801)
IDX = (randn(802, 2, 9).abs() * 10).long() % CONFIG["vocab_size"]
Q, K, V = randn(803, 2, 4, 16, 8), randn(804, 2, 2, 16, 8), randn(805, 2, 2, 16, 8)
X, W = randn(806, 4, 16), randn(807, 16)

CASES = {
    "attention": probe("attention", Q, K, V, True, dtype=F32, grad=(0, 1, 2)),
    "RMSNorm": probe("RMSNorm", X, kind="module", init=(16,), state={"weight": W}, dtype=F32,
                     grad=(0,)),
    "RMSNormFunction": special("saved", args=[X, W], grad_out=X, eps=1e-5, dtype=F32,
                               max_return=0),
    "GPT": gpt_probe("gpt_forward", CONFIG, STATE, dtype=F32, backward=True,
                     inputs={"train": (IDX, IDX)}),
}


TAG = register("discipline", CASES)


# Where the static check looks for each function's forbidden names: its own definition, the
# definitions it is built from, and module-level code (imports).
OWNERS = {"attention": ("attention",), "RMSNorm": ("RMSNorm",),
          "RMSNormFunction": ("RMSNormFunction",),
          "GPT": ("GPT", "Block", "CausalSelfAttention", "attention", "RMSNorm")}


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


@pytest.fixture(scope="module")
def static(impl):
    return static_forbidden(impl)


@pytest.mark.points(1)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.exercises(n),
                                               id=f"function={n}") for n in CASES])
def test_no_forbidden_calls(probes, static, name):
    result(probes, name, f"{name} (float32 forward and backward)")
    for owner in ("<module>", *OWNERS[name]):
        if static.get(owner):
            raise AssertionError(
                f"model.py uses {static[owner][0].split(': ', 1)[1]} ({static[owner][0]}, in "
                f"{owner}), which is forbidden here; {FORBIDDEN_HINT}")
