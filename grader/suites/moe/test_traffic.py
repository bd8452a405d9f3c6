"""What MoELayer communicates and holds, read from the layer runs of test_layer (README §7).

Read from the sidecars' wire log (what they carried), not the rank's own log. Per layer and rank,
forward: exactly three all_to_all_single calls (the counts, an integer
tensor of N or E elements; the tokens; the results back); backward: exactly two, floating. The
token buffers carry between the rows that must leave the rank (distinct (token, other rank)
pairs) and every kept assignment: an all-gather of every token is over budget, and so is any
collective that moves expert weights. Memory: the module holds the router and E/N experts.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.moe._cases import LAYER_SPECS, cases_for, layer_name, run, values, wire_windows
from grader.suites.moe._ref import (
    EXPERTS,
    FFN,
    HIDDEN,
    INTEGER_DTYPES,
    NOT_COMMUNICATION,
    describe,
)
from harness.cases import where

pytestmark = pytest.mark.exercises("MoELayer")
WORLDS = [pytest.param(w, id=f"world_size={w}") for w in (2, 4)]


def _layers(launch, impl, world: int):
    result = run(launch, impl, world)
    for k, cf, _, empty in LAYER_SPECS[world]:
        if empty is not None:
            continue  # judged by test_layer alone: a rank that skips a call fails it there
        name = layer_name(k, cf, empty is not None)
        got = values(result, f"layer {name}")
        case = cases_for(world)[f"layer {name}"]
        for r in range(world):
            yield name, r, got[r], case["bounds"][r], wire_windows(result, r), case


SEND_HINT = "send each kept assignment once, nothing else"
KEPT_DIFFER_HINT = ("this rank's output differs from the reference (test_layer), so it keeps "
                    "other assignments than expected: fix routing and capacity first; the "
                    "rows sent follow from what is kept")


def _send_hint(got: dict, case: dict, r: int) -> str:
    """The traffic hint only when the forward matched: else the kept rows differ anyway."""
    want = case["expected"]["ranks"][r]["y"]
    y = got.get("y") if isinstance(got, dict) else None
    same = isinstance(y, torch.Tensor) and y.shape == want.shape \
        and bool((y.to(want.dtype) - want).abs().max() <= 1e-8)
    return SEND_HINT if same else KEPT_DIFFER_HINT


def _within(record, lo: int, hi: int, side: str) -> bool:
    numel = record.numel if side == "send" else record.out_numel
    return lo <= numel <= hi


@pytest.mark.points(2)
@pytest.mark.parametrize("world", WORLDS)
def test_forward_is_three_all_to_alls(launch, impl, world):
    for name, r, got, bounds, win, case in _layers(launch, impl, world):
        what = f"{where(r, world)} MoELayer ({name}) forward"
        calls = [c for c in win[f"layer {name} forward"] if c.op not in NOT_COMMUNICATION]
        gathers = [c for c in calls if "gather" in c.op or "broadcast" in c.op]
        assert not gathers, (
            f"{what}: never all_gather (or broadcast) tokens or weights; send each kept row "
            f"only to its expert's rank with all_to_all_single (it made {describe(calls)})")
        ops = [c.op for c in calls]
        assert ops == ["all_to_all_single"] * 3, (
            f"{what} made {describe(calls)}; the budget is exactly three all_to_all_single "
            f"calls: the counts, the tokens, the results")
        counts, tokens, results = calls
        assert counts.dtype in INTEGER_DTYPES and counts.numel in (world, EXPERTS), (
            f"{what}: the first all_to_all_single carries the counts, an integer tensor of N "
            f"or E elements; got {counts.numel} elements of {counts.dtype}")
        lo, hi = bounds["send"]
        assert _within(tokens, lo, hi, "send"), (
            f"{what}: {_send_hint(got, case, r)} — the token all-to-all sent {tokens.numel} "
            f"elements; the kept rows that leave this rank make between {lo} and {hi} "
            f"(rows x H={HIDDEN})")
        rlo, rhi = bounds["recv"]
        assert _within(results, rlo, rhi, "send") and _within(results, lo, hi, "recv"), (
            f"{what}: the results all-to-all sent {results.numel} and received "
            f"{results.out_numel} elements; expected the rows this rank received ({rlo}-{rhi}) "
            f"back to their senders ({lo}-{hi})")


@pytest.mark.points(2)
@pytest.mark.parametrize("world", WORLDS)
def test_backward_is_two_all_to_alls(launch, impl, world):
    for name, r, _, bounds, win, _ in _layers(launch, impl, world):
        what = f"{where(r, world)} MoELayer ({name}) backward"
        calls = [c for c in win[f"layer {name} backward"] if c.op not in NOT_COMMUNICATION]
        ops = [c.op for c in calls]
        assert ops == ["all_to_all_single"] * 2, (
            f"{what} made {describe(calls)}; the budget is exactly two all_to_all_single "
            f"calls, the reverses of the token and result all-to-alls (no all-reduce: the "
            f"router's gradient stays per rank)")
        lo, hi = min(bounds["send"][0], bounds["recv"][0]), max(bounds["send"][1],
                                                                bounds["recv"][1])
        for c in calls:
            assert c.dtype not in INTEGER_DTYPES and lo <= c.numel <= hi, (
                f"{what}: an all_to_all_single of {c.numel} {c.dtype} elements; gradients of "
                f"the routed rows only ({lo}-{hi} elements)")


@pytest.mark.points(1)
@pytest.mark.parametrize("world", WORLDS)
def test_experts_stay_local(launch, impl, world):
    local = EXPERTS // world
    budget = (EXPERTS * HIDDEN + local * 3 * FFN * HIDDEN) * 8
    for name, r, got, _, _, _ in _layers(launch, impl, world):
        assert got["held"] <= budget, (
            f"{where(r, world)} MoELayer.from_dense: never keep views of the dense weights, "
            f"copy (.clone()) this rank's experts; it holds {got['held']} bytes, the router "
            f"plus E/N={local} experts are {budget} ({name})")
