"""Buckets: the layout rule of README §3, and what each synchronised backward puts on the wire.

Layouts are compared with the parent's own copy of the packing rule for several models and
caps: every parameter alone (cap 0), a bucket filled exactly to the cap, a frozen parameter,
float32, and a parameter shared under two names. The wire tests read the sidecars' log of the
4-rank SGD run (written outside the ranks): per step, one all-reduce per bucket, each of its
bucket's bytes, in bucket order, and nothing else; construction broadcasts only.
"""

from __future__ import annotations

import pytest

from grader.suites.ddp._cases import (
    BIG,
    LAYOUT_POINTS,
    LAYOUT_SPECS,
    RANDOM_LAYOUTS,
    SGD4,
    pure,
    random_layout_specs,
    wrapper4,
)
from grader.suites.ddp._ref import (
    allreduces,
    buffer_bytes,
    describe_kinds,
    pack,
    pack_with_bytes,
    state_bytes,
)
from harness.cases import where

pytestmark = pytest.mark.exercises("DistributedDataParallel")


@pytest.fixture(scope="module")
def run(launch, impl):
    return wrapper4(launch, impl.text)


def layout_hint(got: list, spec: dict) -> str:
    forward = [names for names, _ in pack_with_bytes(spec, reverse=False)]
    if got == forward:
        return ("buckets are in forward order: take the parameters in REVERSE registration "
                "order, the order backward produces their gradients (README §3)")
    sizes = dict(pack_sizes(spec))
    for bucket in got:
        used = sum(sizes.get(n, 0) for n in bucket)
        if len(bucket) > 1 and used > spec["cap_mb"] * 1024 * 1024:
            return (f"a bucket of {len(bucket)} parameters holds {used} bytes, over the cap of "
                    f"{spec['cap_mb'] * 1024 * 1024:.0f}: close it before the parameter that "
                    f"would exceed the cap (README §3)")
    return "follow README §3's packing rule exactly (reverse order, greedy, cap in bytes)"


def pack_sizes(spec: dict) -> list[tuple[str, int]]:
    from grader.suites.ddp._ranks import build_model

    return [(n, p.numel() * p.element_size()) for n, p in build_model(spec, 0).named_parameters()]


def layout_id(spec: dict) -> str:
    arch = spec.get("arch", "mlp")
    cap = (f"{spec['cap_mb']:g}MiB" if spec["cap_mb"] >= 1 else
           f"{spec['cap_mb'] * 1024 * 1024:.0f}B")
    return f"{arch}{spec['sizes'][1]}-{spec['dtype']}-cap={cap}" + (
        "-frozen" if spec.get("frozen") else "") + ("-norm" if spec.get("norm") else "")


@pytest.mark.parametrize("index", [
    pytest.param(i, marks=pytest.mark.points(points), id=layout_id(spec))
    for i, (spec, points) in enumerate(zip(LAYOUT_SPECS, LAYOUT_POINTS))])
def test_bucket_layout(run, index):
    values = run.values("layouts", "DistributedDataParallel.bucket_layout")
    spec = LAYOUT_SPECS[index]
    expected = pack(spec)
    for rank, layouts in enumerate(values):
        got = layouts[index]
        assert got == expected, (
            f"{where(rank, run.world_size)} bucket_layout ({layout_id(spec)}): "
            f"{layout_hint(got, spec)}; got {got}, expected {expected}")



@pytest.mark.points(1)
def test_random_models_and_caps(launch, impl):
    run = pure(launch, impl.text)
    got = run.values("random_layouts", "DistributedDataParallel.bucket_layout")[0]
    for index, spec in enumerate(random_layout_specs(61, RANDOM_LAYOUTS)):
        expected = pack(spec)
        assert got[index] == expected, (
            f"bucket_layout of a random stack of Linear layers ({spec['dtype']}, cap "
            f"{spec['cap_mb'] * 1024 * 1024:.0f} bytes, {len(spec['frozen'])} frozen): "
            f"{layout_hint(got[index], spec)}; got {got[index]}, expected {expected}")


@pytest.mark.points(1)
def test_default_cap_is_25_mib(launch, impl):
    got = pure(launch, impl.text).values("default_cap", "DistributedDataParallel(module)")[0]
    expected = pack(BIG)
    assert got == expected, (
        f"bucket_layout of a 48 MiB float32 model with the default bucket_cap_mb: got "
        f"{len(got)} bucket(s), expected {len(expected)}; the default cap is 25 MiB")


def _step_records(run, rank: int, step: int) -> list:
    by_label = run.wire_by_label(rank)
    return by_label.get(f"sgd4 step {step}", []) + by_label.get(f"sgd4 step {step} tap", [])


@pytest.mark.points(3)
def test_one_all_reduce_per_bucket_per_step(run):
    run.values("sgd4", "DistributedDataParallel training")
    buckets = pack_with_bytes(SGD4)
    for rank in range(run.world_size):
        for step in range(SGD4["steps"]):
            records = _step_records(run, rank, step)
            others = [r for r in records if r.kind != "allreduce"]
            assert not others, (
                f"{where(rank, run.world_size)} step {step + 1}: backward made "
                f"{describe_kinds(others)} besides all-reduces; a synchronised backward "
                f"all-reduces each bucket once and does nothing else (README §6)")
            got = len(allreduces(records))
            assert got == len(buckets), (
                f"{where(rank, run.world_size)} step {step + 1}: {got} all-reduces in forward "
                f"+ backward, expected one per bucket ({len(buckets)}): launch each bucket "
                f"once, when it is full (README §4)")


@pytest.mark.points(2)
def test_all_reduce_bytes_are_the_buckets(run):
    run.values("sgd4", "DistributedDataParallel training")
    expected = [size for _, size in pack_with_bytes(SGD4)]
    cap = SGD4["cap_mb"] * 1024 * 1024
    for rank in range(run.world_size):
        for step in range(SGD4["steps"]):
            got = [r.bytes for r in allreduces(_step_records(run, rank, step))]
            over = [b for b in got if b > cap and b not in expected]
            assert not over, (
                f"{where(rank, run.world_size)} step {step + 1}: an all-reduce of {over[0]} "
                f"bytes is over the cap of {cap:.0f}; buckets of several parameters stay "
                f"within the cap (README §3)")
            assert got == expected, (
                f"{where(rank, run.world_size)} step {step + 1}: all-reduce sizes {got} bytes, "
                f"expected the buckets' {expected} in bucket order (README §3-§4)")


@pytest.mark.points(2)
def test_construction_broadcasts_only(run):
    run.values("sgd4", "DistributedDataParallel training")
    expected = state_bytes(SGD4)
    for rank in range(run.world_size):
        records = run.wire_by_label(rank).get("sgd4 construct", [])
        others = [r for r in records if r.kind != "broadcast"]
        assert not others, (
            f"{where(rank, run.world_size)} the constructor made {describe_kinds(others)}; it "
            f"only broadcasts rank 0's parameters and buffers (README §6)")
        got = sum(r.bytes for r in records)
        assert got != expected - buffer_bytes(SGD4), (
            f"{where(rank, run.world_size)} the constructor broadcast the parameters but not "
            f"the buffers ({got} bytes, expected {expected}): broadcast every buffer too "
            f"(README §6)")
        assert got == expected, (
            f"{where(rank, run.world_size)} the constructor broadcast {got} bytes, expected "
            f"{expected}: every parameter (frozen ones too) and every buffer, once (README §6)")
        after = run.wire_by_label(rank)
        for step in range(SGD4["steps"]):
            late = after.get(f"sgd4 step {step} end", [])
            assert not late, (
                f"{where(rank, run.world_size)} after backward of step {step + 1} (during "
                f"optimizer.step) the wrapper made {describe_kinds(late)}; all communication "
                f"happens inside backward")
