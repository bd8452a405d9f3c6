"""The communication log sees every public torch.distributed call; forbidden calls fail."""

from __future__ import annotations

import pytest

from harness import P2P_APIS, CommRecord, Forbid, ForbiddenCallError, launch
from harness.tests import rankfns


@pytest.fixture(scope="module")
def talk_log():
    result = launch(rankfns.talk, world_size=3)
    return result


def test_log_comes_back_as_records_in_call_order(talk_log):
    for r in range(3):
        ops = [rec.op for rec in talk_log.comm[r]]
        assert ops[-1] == "irecv" and "mark" in ops
        first_two = ops[:2]
        assert first_two == (["send", "recv"] if r % 2 == 0 else ["recv", "send"])
        assert all(isinstance(rec, CommRecord) for rec in talk_log.comm[r])
        # the rank's own view of the log (returned as its value) matches the transported one
        assert [CommRecord.from_plain(d) for d in talk_log.values[r]] == talk_log.comm[r]


def test_point_to_point_records_peer_bytes_and_group(talk_log):
    send = next(rec for rec in talk_log.comm[0] if rec.op == "send")
    recv = next(rec for rec in talk_log.comm[0] if rec.op == "recv")
    assert send.peer == 1 and recv.peer == 2
    assert send.numel == 6 and send.bytes == 24 and send.dtype == "torch.float32"
    assert send.group_ranks == (0, 1, 2)


def test_collectives_record_input_and_output_sizes(talk_log):
    by_op = {rec.op: rec for rec in talk_log.comm[2]}
    assert by_op["all_reduce"].bytes == 40 and by_op["all_reduce"].dtype == "torch.float64"
    assert by_op["broadcast"].peer == 1
    assert by_op["all_gather_into_tensor"].numel == 2
    assert by_op["all_gather_into_tensor"].out_numel == 6
    assert by_op["reduce_scatter_tensor"].numel == 6
    assert by_op["reduce_scatter_tensor"].out_numel == 2


def test_batched_p2p_ops_are_logged_one_by_one(talk_log):
    batched = [rec for rec in talk_log.comm[1] if rec.batched]
    assert [(rec.op, rec.peer, rec.numel) for rec in batched] == [("isend", 2, 4), ("irecv", 0, 4)]


def test_marks_separate_phases(talk_log):
    mark = next(rec for rec in talk_log.comm[0] if rec.op == "mark")
    assert mark.label == "collectives"


def test_subgroup_peers_are_global_ranks():
    result = launch(rankfns.subgroup_send, world_size=4)
    send = next(rec for rec in result.comm[1] if rec.op == "send")
    recv = next(rec for rec in result.comm[3] if rec.op == "recv")
    assert send.peer == 3 and recv.peer == 1 and send.group_ranks == (1, 3)


def test_forbidden_call_fails_with_the_rule():
    rule = Forbid(apis={"all_reduce"}, rule="build all-reduce from send/recv (README §3)")
    with pytest.raises(ForbiddenCallError, match=r"all_reduce is forbidden here: build"):
        launch(rankfns.forbidden_all_reduce, world_size=2, args=(False,), forbid=rule)


def test_a_swallowed_forbidden_call_still_fails():
    rule = Forbid(allow_only=P2P_APIS, rule="point-to-point only")
    with pytest.raises(ForbiddenCallError, match="caught inside the rank, but it still counts"):
        launch(rankfns.forbidden_all_reduce, world_size=2, args=(True,), forbid=rule)


def test_process_group_methods_are_seen_too():
    result = launch(rankfns.process_group_method, world_size=2)
    assert [rec.op for rec in result.comm[0]] == ["ProcessGroup.allreduce"]
    with pytest.raises(ForbiddenCallError):
        launch(rankfns.process_group_method, world_size=2,
               forbid=Forbid(allow_only=P2P_APIS, rule="point-to-point only"))


def test_forbid_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown APIs"):
        Forbid(apis={"allreduce_typo"})
