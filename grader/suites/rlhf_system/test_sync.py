"""Weight sync (README §5–§6): manifests and buckets (one rank), then one 4-rank launch over
the sidecars whose syncs are judged bit for bit in the parent and, for bytes, message sizes
and their order, from the wire log.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from assignments.rlhf_system.toy import encode_manifest
from grader.suites.rlhf_system import _ref
from grader.suites.rlhf_system._cases import TP_PLAN, flow_run, sync_run
from harness.cases import case_value, case_values
from harness.commlog import CommRecord

BUFFERS = ("logit_bias", "num_updates")
ORDER_HINT = ("pack and unpack every bucket in manifest order on both sides (sizes match "
              "either way; values do not)")
BUFFER_HINT = "buffers are part of the weights: sync the whole state_dict, not only parameters"
BUCKET_HINT = ("greedy in manifest order: an entry joins the current bucket while its bytes "
               "stay <= bucket_bytes, else it starts the next")


def _flow(launch: Any, impl: Any, name: str) -> tuple[Any, dict[str, Any]]:
    run = flow_run(launch, impl.text)
    return case_value(run["out"][name], name), run["calls"][name]


@pytest.mark.points(1)
@pytest.mark.exercises("make_manifest")
def test_manifest_in_state_order(launch, impl):
    got, s = _flow(launch, impl, "manifest")
    want = [[k, tuple(v.shape), str(v.dtype)] for k, v in s["state"].items()]
    got = [[e[0], tuple(e[1]), e[2]] for e in got] if isinstance(got, list) else got
    assert got == want, ("make_manifest: one (name, tuple(shape), str(dtype)) per state entry, "
                         f"in the state's order, buffers included; got {str(got)[:80]}")


@pytest.mark.points(3)
@pytest.mark.exercises("plan_buckets")
def test_plan_buckets_fixed_and_drawn(launch, impl):
    run = flow_run(launch, impl.text)
    for name in [n for n in run["calls"] if n.startswith("buckets/")]:
        got, s = _flow(launch, impl, name)
        want = _ref.buckets(s["manifest"], s["limit"])
        assert got == want, (f"plan_buckets ({name}): {BUCKET_HINT}; got {got}, expected {want} "
                             f"for {len(s['manifest'])} entries and bucket_bytes={s['limit']}")


@pytest.mark.points(1)
@pytest.mark.exercises("plan_buckets")
def test_plan_buckets_rejects_what_fits_no_bucket(launch, impl):
    for name in ("buckets_error/too_large", "buckets_error/zero", "buckets_error/zero_empty"):
        got, s = _flow(launch, impl, name)
        assert got == "ValueError", (f"plan_buckets ({name}): raise ValueError for an entry "
                                     f"larger than bucket_bytes or bucket_bytes < 1; got "
                                     f"{got or 'no error'}")


@pytest.mark.points(3)
@pytest.mark.exercises("shard_for_tp")
def test_shard_for_tp_slices(launch, impl):
    run = flow_run(launch, impl.text)
    for name in [n for n in run["calls"] if n.startswith("shard/")]:
        got, s = _flow(launch, impl, name)
        want = _ref.tp_slice(s["name"], s["tensor"], s["tp_rank"], s["tp_size"], TP_PLAN)
        kind = TP_PLAN.get(s["name"], "replicated")
        out = got["out"]
        if not (isinstance(out, torch.Tensor) and out.shape == want.shape
                and torch.equal(out, want)):
            raise AssertionError(
                f"shard_for_tp ({name}): a {kind} tensor is cut along "
                f"{'dim 0' if kind == 'column' else 'dim 1' if kind == 'row' else 'no dim'}: "
                f"expected shape {tuple(want.shape)}, got {tuple(getattr(out, 'shape', ()))} "
                f"or other values; row-parallel weights are cut along dim 1 (input features)")
        assert not got["shares"] and got["contiguous"] and got["input_intact"], (
            f"shard_for_tp ({name}): return a new contiguous tensor (not a view of the input), "
            f"and leave the input unchanged")
    for name in ("shard_error/indivisible", "shard_error/rank"):
        got, _ = _flow(launch, impl, name)
        assert got == "ValueError", (f"shard_for_tp ({name}): raise ValueError for a dimension "
                                     f"tp_size does not divide or tp_rank outside [0, tp_size)")


# ---- the 4-rank sync launch -----------------------------------------------------------------


def _case(launch: Any, impl: Any, name: str) -> tuple[dict[str, Any], list[Any]]:
    cases, run = sync_run(launch, impl.text)
    case = next(c for c in cases if c["name"] == name)
    return case, case_values(run.values, name)


def _window(log: list[CommRecord], name: str) -> list[CommRecord]:
    out: list[CommRecord] = []
    inside = False
    for record in log:
        if record.op == "mark":
            inside = record.label == f"case:{name}"
        elif inside:
            out.append(record)
    return out


def _check_received(case: dict[str, Any], rank: int, got: dict[str, Any]) -> None:
    what = f"[rank {rank} of 4] sync {case['name']}"
    recv = case["recv"][rank]
    state = got["state"]
    names = list(case["state"])
    for name in [n for n in names if n not in BUFFERS] + [n for n in names if n in BUFFERS]:
        want = case["state"][name]
        if recv["tp_size"] > 1:
            want = _ref.tp_slice(name, want, recv["tp_rank"], recv["tp_size"], TP_PLAN)
        have = state.get(name)
        if isinstance(have, torch.Tensor) and torch.equal(have, want):
            continue
        if name in BUFFERS:
            raise AssertionError(f"{what}: buffer {name} differs from the sender's; {BUFFER_HINT}")
        if recv["tp_size"] > 1 and name in TP_PLAN:
            raise AssertionError(f"{what}: {name} is not the TP slice {recv['tp_rank']} of "
                                 f"{recv['tp_size']} ({TP_PLAN[name]}-parallel: cut along dim "
                                 f"{0 if TP_PLAN[name] == 'column' else 1}) of the sender's")
        raise AssertionError(f"{what}: {name} differs from the sender's after the sync; "
                             f"{ORDER_HINT}")
    assert got["version"] == case["version"], (
        f"{what}: recv_weights returned version {got['version']}, the sender sent "
        f"{case['version']}; return the header's version")


SYNCS = ["full-3_receivers-v7", "full-again-v8", "small_buckets-B=16896",
         "mixed_dtypes-unaligned-v14"]


@pytest.mark.points(7)
@pytest.mark.exercises("send_weights", "recv_weights")
def test_sync_bit_identical_with_buffers_and_versions(launch, impl):
    for name in SYNCS:
        case, got = _case(launch, impl, name)
        assert got[0] is not None and got[0]["intact"], \
            f"send_weights ({name}) modified the sender's state"
        for rank in case["recv"]:
            _check_received(case, rank, got[rank])


def _expected_sizes(case: dict[str, Any]) -> list[int]:
    manifest = [(k, tuple(v.shape), str(v.dtype)) for k, v in case["state"].items()]
    sizes = [16, int(encode_manifest(manifest).numel())]
    for bucket in _ref.buckets(manifest, case["bucket_bytes"]):
        sizes.append(sum(_ref.entry_bytes(manifest[i][1], manifest[i][2]) for i in bucket))
    return sizes


def _check_wire(launch: Any, impl: Any, name: str) -> None:
    case, _ = _case(launch, impl, name)
    _, run = sync_run(launch, impl.text)
    assert run.wire is not None
    want = _expected_sizes(case)
    model_bytes = sum(v.numel() * v.element_size() for v in case["state"].values())
    for rank in case["recv"]:
        got = [r.bytes for r in _window(run.wire[rank], name) if r.op == "recv" and r.peer == 0]
        what = f"[rank {rank} of 4] sync {name} on the wire"
        if sum(got[2:]) != model_bytes:
            raise AssertionError(f"{what}: {sum(got[2:])} bytes of buckets received, the state "
                                 f"holds {model_bytes}; send every entry's bytes once")
        big = [b for b in got[2:] if b > case["bucket_bytes"]]
        assert not big, f"{what}: a bucket of {big[0]} bytes exceeds bucket_bytes " \
            f"{case['bucket_bytes']}"
        assert got == want, (f"{what}: messages of {got} bytes, expected {want} (header 16, "
                             f"manifest, then the buckets of plan_buckets in manifest order)")
    sends = [r for r in _window(run.wire[0], name) if r.op == "send"]
    peers = [r.peer for r in sends]
    order = [p for i, p in enumerate(peers) if i == 0 or peers[i - 1] != p]
    assert order == list(case["dst"]), (f"send_weights ({name}): destinations served in order "
                                        f"{order}, expected {list(case['dst'])}, each completely "
                                        f"before the next")
    others = [r for r in run.wire[0] if r.op not in ("mark", "send", "recv")]
    assert not others, f"a sync is point-to-point; rank 0 ran {others[0].op} on the wire"


@pytest.mark.points(6)
@pytest.mark.exercises("send_weights", "recv_weights")
def test_sync_bytes_buckets_and_order_on_the_wire(launch, impl):
    for name in SYNCS:
        _check_wire(launch, impl, name)


@pytest.mark.points(6)
@pytest.mark.exercises("send_weights", "recv_weights")
def test_sync_to_tensor_parallel_receivers(launch, impl):
    name = "tp-2_slices-plus_full"
    case, got = _case(launch, impl, name)
    for rank in (2, 3, 1):
        _check_received(case, rank, got[rank])
    _check_wire(launch, impl, name)


@pytest.mark.points(3)
@pytest.mark.exercises("send_weights", "recv_weights")
def test_sync_bad_input(launch, impl):
    name = "bad_bucket-too_small"
    case, got = _case(launch, impl, name)
    assert got[0] == "ValueError", (f"send_weights ({name}): raise ValueError when an entry is "
                                    f"larger than bucket_bytes; got {got[0] or 'no error'}")
    _, run = sync_run(launch, impl.text)
    assert run.wire is not None
    sent = [r for r in _window(run.wire[0], name) if r.op == "send"]
    assert not sent, f"send_weights ({name}) sent {len(sent)} messages before raising; check " \
        "the buckets first"
    name = "bad_manifest-renamed"
    case, got = _case(launch, impl, name)
    assert got[1] == "ValueError", (f"recv_weights ({name}): raise ValueError when the "
                                    f"manifest's names differ from the state's; got "
                                    f"{got[1] or 'no error'}")
    case, got = _case(launch, impl, "after_bad-v13")
    for rank in case["recv"]:
        _check_received(case, rank, got[rank])
