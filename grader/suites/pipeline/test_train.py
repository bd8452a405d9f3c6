"""train_step on 2, 3 and 4 stages: parity with one process, messages, bytes, memory, errors.

One launch per number of stages runs every case of that size (sidecar transport: what crossed
the wire is logged outside the rank, and the rank's own log is checked against it, so the order
and sizes read from `result.comm` can be trusted). Parity compares each stage's parameters and
accumulated gradients with the single-process step on the whole batch (float64, default
tolerance). Memory is the peak number of micro-batches whose saved tensors are alive at once,
counted by suite code in the rank (README §6). A case that hangs costs only its own tests:
the launch is made again without it (`harness.cases.launch_cases`), and the message and byte
tests of its p judge the cases that returned.
"""

from __future__ import annotations

import pytest

from grader.suites.pipeline._cases import (
    RECV_OPS,
    SEND_OPS,
    TrainCase,
    train_runs,
    train_values,
    where,
)
from grader.suites.pipeline._ranks import TRAIN_ERRORS
from grader.suites.pipeline._ref import expected_schedule
from grader.suites.pipeline._ref_train import check_parity
from harness.commlog import windows

pytestmark = pytest.mark.exercises("train_step")

CASES = {
    2: (TrainCase("gpipe", 4, (1, 1), seed=1),
        TrainCase("1f1b", 4, (2, 1), seed=2),
        TrainCase("1f1b", 1, (1, 2), seed=3),
        TrainCase("gpipe", 8, (2, 2), seed=4),
        TrainCase("1f1b", 2, (1, 1), seed=12, float32=True)),
    3: (TrainCase("gpipe", 4, (3, 1, 2), seed=5),
        TrainCase("1f1b", 8, (1, 2, 1), seed=6),
        TrainCase("1f1b", 2, (1, 1, 1), seed=7)),
    4: (TrainCase("1f1b", 8, (2, 1, 1, 2), seed=8),
        TrainCase("gpipe", 8, (1, 1, 1, 1), seed=9),
        TrainCase("1f1b", 2, (1, 1, 1, 1),
                  seed=10),
        TrainCase("gpipe", 1, (1, 1, 1, 1), seed=11)),
}
ALL = [(p, case) for p, cases in CASES.items() for case in cases]


def _values(launch, impl, p: int, case: TrainCase) -> list[dict]:
    return train_values(train_runs(launch, impl, CASES[p]), case.name,
                        f"train_step ({case.name}, p={p})")


def _finished(launch, impl, p: int) -> list[TrainCase]:
    """The cases of p whose train_step returned on every stage. A case that failed (raised,
    hung) is charged by its own parity test, not again by the message and byte tests of its
    p; if none returned, the first case's error is raised here too."""
    done = []
    for case in CASES[p]:
        try:
            _values(launch, impl, p, case)
        except AssertionError:
            continue
        done.append(case)
    if not done:
        _values(launch, impl, p, CASES[p][0])
    return done


@pytest.mark.points(2)
@pytest.mark.parametrize("p,case", [pytest.param(p, c, id=f"p={p}-{c.name}") for p, c in ALL])
def test_stages_match_single_process(launch, impl, p, case):
    check_parity(case, _values(launch, impl, p, case))


def _expected_messages(case: TrainCase, s: int) -> list[tuple[str, int, int]]:
    """(direction, peer, bytes) for each message of stage s, in schedule order."""
    p, b = case.p, case.rows // case.m
    size = b * case.width * case.itemsize
    out = []
    for op, _ in expected_schedule(case.kind, p, case.m, s):
        if op == "F":
            out += [("recv", s - 1, size)] if s > 0 else []
            out += [("send", s + 1, size)] if s < p - 1 else []
        else:
            out += [("recv", s + 1, size)] if s < p - 1 else []
            out += [("send", s - 1, size)] if s > 0 else []
    return out


def _messages(result, case: TrainCase, s: int) -> list[tuple[str, int | None, int]]:
    records = windows(result.comm[s], "case ").get(f"case {case.name}", [])
    out: list[tuple[str, int | None, int]] = []
    for r in records:
        if r.op == "mark":
            break  # the "end" mark: what follows belongs to the harness
        kind = "send" if r.op in SEND_OPS else "recv" if r.op in RECV_OPS else r.op
        out.append((kind, r.peer, r.bytes))
    return out


@pytest.mark.points(2)
@pytest.mark.parametrize("p", [pytest.param(p, id=f"p={p}") for p in CASES])
def test_message_order(launch, impl, p):
    result = train_runs(launch, impl, CASES[p])
    for case in _finished(launch, impl, p):
        for s in range(p):
            got = [(k, peer) for k, peer, _ in _messages(result, case, s)]
            want = [(k, peer) for k, peer, _ in _expected_messages(case, s)]
            if got == want:
                continue
            first = next((i for i, (a, e) in enumerate(zip(got, want)) if a != e),
                         min(len(got), len(want)))
            raise AssertionError(
                f"{where(s, p)} {case.name}: message {first} is "
                f"{got[first] if first < len(got) else 'missing'}, expected "
                f"{want[first] if first < len(want) else 'none'} ({len(got)} messages, "
                f"expected {len(want)}): per action, F receives from s-1 then sends to s+1, "
                f"B receives from s+1 then sends to s-1, in schedule order")


@pytest.mark.points(1)
@pytest.mark.parametrize("p", [pytest.param(p, id=f"p={p}") for p in CASES])
def test_bytes_per_boundary(launch, impl, p):
    result = train_runs(launch, impl, CASES[p])
    for case in _finished(launch, impl, p):
        size = case.rows // case.m * case.width * case.itemsize
        for s in range(p - 1):
            forward = [x for x in _messages(result, case, s) if x[0] == "send" and x[1] == s + 1]
            backward = [x for x in _messages(result, case, s + 1)
                        if x[0] == "send" and x[1] == s]
            for name, sent in (("activation", forward), ("gradient", backward)):
                total = sum(x[2] for x in sent)
                if len(sent) != case.m or total != case.m * size:
                    raise AssertionError(
                        f"{case.name}: boundary {s}|{s + 1} carried {len(sent)} {name} messages"
                        f" of {total} bytes in all, expected {case.m} of {size} bytes (one per "
                        f"micro-batch, the micro-batch's {name} and nothing else)")


def _memory_cases(kind: str, m_by_p: dict[int, int]):
    """The case of each p with this kind and m (one per number of stages)."""
    return [pytest.param(p, c, id=f"p={p}-{c.name}") for p, c in ALL
            if c.kind == kind and m_by_p.get(p) == c.m]


@pytest.mark.points(1)
@pytest.mark.parametrize("p,case", _memory_cases("gpipe", {2: 8, 3: 4, 4: 8}))
def test_memory_gpipe(launch, impl, p, case):
    for s, value in enumerate(_values(launch, impl, p, case)):
        _check_probe(value, case, s)
        assert value["peak"] == case.m, (
            f"{where(s, p)} {case.name}: activations of {value['peak']} micro-batches were alive "
            f"at once, expected all {case.m} under GPipe (every forward runs before any backward)")


@pytest.mark.points(1)
@pytest.mark.parametrize("p,case", _memory_cases("1f1b", {2: 4, 3: 8, 4: 8}))
def test_memory_1f1b(launch, impl, p, case):
    for s, value in enumerate(_values(launch, impl, p, case)):
        _check_probe(value, case, s)
        bound = min(case.m, p - s)
        assert value["peak"] <= bound, (
            f"{where(s, p)} {case.name}: activations of {value['peak']} micro-batches were alive "
            f"at once, expected at most min(m, p - stage) = {bound} under 1F1B: run each "
            f"backward as soon as the schedule says and drop the micro-batch's graph after it")


def _check_probe(value: dict, case: TrainCase, s: int) -> None:
    p = case.p
    if value["forwards"] != case.m:
        raise AssertionError(f"{where(s, p)} {case.name}: stage_module was called "
                             f"{value['forwards']} times, expected once per micro-batch "
                             f"({case.m})")
    packs = value["packs"]
    if min(packs) == 0 or len(set(packs)) != 1:
        raise AssertionError(f"{where(s, p)} {case.name}: autograd saved {packs} tensors in the "
                             f"stage's forward calls, expected the same positive number in each"
                             f": run stage_module under autograd, with no saved-tensor hooks "
                             f"of your own")
    if value["alive_after"]:
        raise AssertionError(f"{where(s, p)} {case.name}: {value['alive_after']} micro-batches' "
                             f"activations are still alive after the step: free each "
                             f"micro-batch's graph after its backward")


@pytest.mark.points(1)
def test_bad_arguments(launch, impl):
    result = train_runs(launch, impl, CASES[2])
    for name in TRAIN_ERRORS:
        raised = train_values(result, name, f"train_step ({name})")
        for s, value in enumerate(raised):
            assert value == "ValueError", (
                f"{where(s, 2)} train_step ({name}) returned instead of raising ValueError")
            records = windows(result.comm[s], "case ").get(f"case {name}", [])
            calls = [r.op for r in records if r.op != "mark"]
            assert not calls, (f"{where(s, 2)} train_step ({name}) communicated "
                               f"({', '.join(calls[:4])}) before raising ValueError: check the "
                               f"arguments first")
