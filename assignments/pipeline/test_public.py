"""Public tests of pipeline (20 of 100 points): run `pytest assignments/pipeline`.

Each test starts fresh rank processes with `launch`, runs a rank function there (the `rank_*`
functions below, which import your pipeline.py through `ctx.impl_module`), and compares what
comes back with plain torch computed here. Launches of train_step allow only point-to-point
calls: a collective fails the test. How a failure is explained (a hang, a gradient that
differs) is shared with the hidden suite in `_provided_checks.py`. The hidden suite checks more:
3 and 4 stages, uneven partitions, fewer micro-batches than stages, the order and size of every
message, the activation memory of each schedule, the interleaved stretch goal and bad arguments.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from assignments.pipeline._provided_checks import P2P_ONLY, explain, grad_hint
from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import Memo, case_values, launch_cases

TIMEOUT_S = 60.0
WIDTH, ROWS, LR = 4, 8, 0.1


# ---- rank functions: these run inside the rank processes -----------------------------------------

def rank_partition(ctx, cases):
    pl = ctx.impl_module("pipeline", "pipeline")
    return [[list(pair) for pair in pl.partition(costs, p)] for costs, p in cases]


def rank_schedules(ctx, cases):
    pl = ctx.impl_module("pipeline", "pipeline")
    return [[list(a) for a in pl.schedule(kind, p, m, s)] for kind, p, m, s in cases]


def rank_train(ctx, m, weights, biases, batch, targets):
    """GPipe, then 1F1B, each in its own error scope (a failure in one leaves the other)."""
    from harness.cases import run_cases

    return run_cases(ctx, [(kind, lambda k=kind: train_one(ctx, k, m, weights, biases, batch,
                                                            targets))
                           for kind in ("gpipe", "1f1b")])


def train_one(ctx, kind, m, weights, biases, batch, targets):
    """Stage s holds layer s (Linear + tanh); the parent sent every layer's weights."""
    pl = ctx.impl_module("pipeline", "pipeline")
    s, p = ctx.rank, ctx.world_size
    stage = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64),
                                torch.nn.Tanh())
    with torch.no_grad():
        stage[0].weight.copy_(weights[s])
        stage[0].bias.copy_(biases[s])
    optimizer = torch.optim.SGD(stage.parameters(), lr=LR)
    loss = pl.train_step(stage, optimizer, kind=kind, num_microbatches=m,
                         in_shape=(ROWS // m, WIDTH), batch=batch if s == 0 else None,
                         targets=targets if s == p - 1 else None,
                         loss_fn=F.mse_loss if s == p - 1 else None, dtype=torch.float64)
    return {"loss": loss, "weight": stage[0].weight, "weight_grad": stage[0].weight.grad,
            "bias_grad": stage[0].bias.grad}


# ---- references (plain Python and torch, in this process) ----------------------------------------

def expected_1f1b(p, m, s):
    w = min(p - s - 1, m)
    out = [["F", i] for i in range(w)]
    for i in range(m - w):
        out += [["F", w + i], ["B", i]]
    return out + [["B", i] for i in range(m - w, m)]


def replay(actions):
    """Each stage runs its actions in order as soon as their inputs are ready (F costs 1, B 2);
    returns (makespan, busy time per stage)."""
    p = len(actions)
    done, clock, busy, pos = {}, [0] * p, [0] * p, [0] * p
    while any(pos[s] < len(actions[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while pos[s] < len(actions[s]):
                op, mb = actions[s][pos[s]][:2]
                deps = ([("F", mb, s - 1)] if op == "F" and s > 0 else
                        [("F", mb, s)] + ([("B", mb, s + 1)] if s < p - 1 else [])
                        if op == "B" else [])
                if any(d not in done for d in deps):
                    break
                clock[s] = max([clock[s]] + [done[d] for d in deps]) + (1 if op == "F" else 2)
                busy[s] += 1 if op == "F" else 2
                done[(op, mb, s)] = clock[s]
                pos[s] += 1
                moved = True
        assert moved, f"the schedules deadlock: stage(s) stuck at {pos}"
    return max(clock), busy


# ---- tests ---------------------------------------------------------------------------------------

@pytest.mark.exercises("partition")
@pytest.mark.points(4)
def test_partition(launch):
    cases = [([1, 2, 3, 4, 5, 6], 3), ([4, 1, 1, 1, 1, 4], 3), ([1, 1, 1, 1], 3), ([5], 1)]
    expected = [[[0, 3], [3, 5], [5, 6]], [[0, 1], [1, 5], [5, 6]],
                [[0, 2], [2, 3], [3, 4]], [[0, 1]]]
    got = launch(rank_partition, 1, args=(cases,), timeout=TIMEOUT_S).values[0]
    for (costs, p), g, e in zip(cases, got, expected):
        assert g == e, (f"partition({costs}, {p}) returned {g}, expected {e}: balance the "
                        "stages' cost, not their number of layers; on a tie the earliest "
                        "stages take as many layers as they can")


SCHEDULES = [("gpipe", 3, 2, s) for s in range(3)] + [("1f1b", 4, 6, s) for s in range(4)]
SCHEDULES += [("1f1b", 4, 2, s) for s in range(4)]
SCHEDULES += [(kind, 4, 8, s) for kind in ("gpipe", "1f1b") for s in range(4)]  # the bubble
MEMO = Memo()  # one launch per implementation for the schedule tests, one for train_step


def _schedules(launch, impl):
    return MEMO.get((impl, "schedules"), lambda: dict(zip(SCHEDULES, launch(
        rank_schedules, 1, args=(SCHEDULES,), timeout=TIMEOUT_S).values[0])))


@pytest.mark.exercises("schedule")
@pytest.mark.points(5)
def test_schedules(launch, impl):
    cases = SCHEDULES[:11]
    got = [_schedules(launch, impl)[c] for c in cases]
    for (kind, p, m, s), g in zip(cases, got):
        if kind == "gpipe":
            e = [["F", i] for i in range(m)] + [["B", i] for i in range(m)]
            assert g == e, f"schedule('gpipe', {p}, {m}, {s}) returned {g}, expected {e}"
            continue
        e = expected_1f1b(p, m, s)
        w = min(p - s - 1, m)
        lead = next((i for i, a in enumerate(g) if a[0] != "F"), len(g))
        assert lead in (w, min(w + 1, m)), (
            f"schedule('1f1b', {p}, {m}, {s}) starts with {lead} forwards: the warm-up is "
            f"min(p - stage - 1, m) = {w} forwards, then F and B alternate")
        for i, (a, b) in enumerate(zip(g, e)):
            part = ("warm-up" if i < w else "steady F/B pairs" if i < w + 2 * (m - w) else
                    "cool-down: the remaining backwards in micro-batch order")
            assert a == b, (f"schedule('1f1b', {p}, {m}, {s}): action {i} is {a}, expected {b} "
                            f"({part})")
        assert len(g) == len(e), (f"schedule('1f1b', {p}, {m}, {s}) has {len(g)} actions, "
                                  f"expected {len(e)}: each micro-batch once as F, once as B")


@pytest.mark.exercises("schedule")
@pytest.mark.points(3)
def test_bubble(launch, impl):
    p, m = 4, 8
    cases = [(kind, p, m, s) for kind in ("gpipe", "1f1b") for s in range(p)]
    got = [_schedules(launch, impl)[c] for c in cases]
    for k, kind in enumerate(("gpipe", "1f1b")):
        makespan, busy = replay(got[k * p:(k + 1) * p])
        for s in range(p):
            idle = Fraction(makespan - busy[s], makespan)
            assert idle == Fraction(p - 1, m + p - 1), (
                f"{kind}, p={p}, m={m}: stage {s} is idle {float(idle):.3f} of the step, "
                f"expected (p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.3f}")


def _reference(kind_m, weights, biases, batch, targets, only=None):
    m = kind_m
    ws = [w.clone().requires_grad_() for w in weights]
    bs = [b.clone().requires_grad_() for b in biases]
    total = 0
    for i, (x, y) in enumerate(zip(batch.split(ROWS // m), targets.split(ROWS // m))):
        if only is not None and i not in only:
            continue
        for w, b in zip(ws, bs):
            x = torch.tanh(F.linear(x, w, b))
        total = total + F.mse_loss(x, y)
    (total / m).backward()
    return [w.grad for w in ws], [b.grad for b in bs], float(total.detach()) / m


@pytest.mark.exercises("train_step")
@pytest.mark.points(4)
@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_train_step_two_stages(launch, impl, kind):
    p, m = 2, 4
    gen = seeded_generator(5)
    weights = [torch.randn(WIDTH, WIDTH, generator=gen, dtype=torch.float64) * 0.7
               for _ in range(p)]
    biases = [torch.randn(WIDTH, generator=gen, dtype=torch.float64) * 0.1 for _ in range(p)]
    batch = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)
    targets = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)
    try:
        # A case that hangs is left out and the launch made again: it costs only itself.
        result = MEMO.get((impl, "train"), lambda: launch_cases(lambda env: launch(
            rank_train, p, args=(m, weights, biases, batch, targets), forbid=P2P_ONLY,
            timeout=TIMEOUT_S, env=env), ["gpipe", "1f1b"]))
        values = case_values(result.values, kind, f"train_step ({kind})")
    except AssertionError as exc:
        raise explain(exc) from None
    gw, gb, loss = _reference(m, weights, biases, batch, targets)
    lw, lb, _ = _reference(m, weights, biases, batch, targets, only=[m - 1])
    for s in reversed(range(p)):
        v = values[s]
        assert v["weight_grad"] is not None, f"[stage {s}] weight.grad is None after train_step"
        assert_close(v["weight_grad"], gw[s], what=f"[stage {s} of {p}] {kind} weight grad",
                     hint=grad_hint(v["weight_grad"], gw[s], m=m, s=s, p=p,
                                    only_last=lambda s=s: lw[s]), hint_first=True)
        assert_close(v["bias_grad"], gb[s], what=f"[stage {s} of {p}] {kind} bias grad",
                     hint=grad_hint(v["bias_grad"], gb[s], m=m, s=s, p=p,
                                    only_last=lambda s=s: lb[s]), hint_first=True)
        assert_close(v["weight"], weights[s] - LR * gw[s],
                     what=f"[stage {s} of {p}] {kind} weight after the step",
                     hint="one optimizer.step() after the last backward", hint_first=True)
    assert values[0]["loss"] is None, "train_step returns None on stages other than the last"
    assert isinstance(values[-1]["loss"], float), "the last stage returns the loss as a float"
    assert abs(values[-1]["loss"] - loss) <= 1e-9 * max(1.0, abs(loss)), (
        f"the last stage returned loss {values[-1]['loss']}, expected {loss}: the mean over "
        "micro-batches of loss_fn's values")
