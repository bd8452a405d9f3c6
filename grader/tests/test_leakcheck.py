"""grader/leakcheck.py: an expected value sent to the ranks is found, an input is not."""

from __future__ import annotations

import pytest
import torch

from grader import leakcheck


def _ledger(tmp_path, monkeypatch):
    path = tmp_path / "findings.jsonl"
    monkeypatch.setattr(leakcheck, "_path", str(path))
    monkeypatch.setattr(leakcheck, "_sent", [])
    monkeypatch.setattr(leakcheck, "_filed", {})
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "grader/suites/demo/test_x.py::test_y (call)")
    return path


def test_an_expected_value_sent_to_the_ranks_is_found_even_as_a_slice(tmp_path, monkeypatch):
    path = _ledger(tmp_path, monkeypatch)
    g = torch.Generator().manual_seed(0)
    logits, grad = torch.randn(4, 32, generator=g), torch.randn(4, 32, generator=g)
    leakcheck.observe_launch("rank_ce", ({"ce": {"logits": logits, "grad": grad}},), {}, None)
    leakcheck.compared(torch.softmax(logits, -1))  # computed in the parent: not sent
    assert leakcheck.findings(str(path)) == []
    leakcheck.compared(grad[:, 8:16].clone())  # rank 1's slice of the dense answer
    found = leakcheck.findings(str(path))
    assert len(found) == 1 and "['grad']" in found[0]["sent"], found
    assert found[0]["test"] == "grader/suites/demo/test_x.py::test_y"


def test_small_or_integer_values_are_not_judged(tmp_path, monkeypatch):
    path = _ledger(tmp_path, monkeypatch)
    counts = torch.arange(64, dtype=torch.float32)
    leakcheck.observe_launch("rank_fn", (counts, torch.tensor([0.5, 0.25])), {}, None)
    leakcheck.compared(counts[:10])  # integers: indices and counts collide by chance
    leakcheck.compared(torch.tensor([0.5, 0.25]))  # too few values to tell
    assert leakcheck.findings(str(path)) == []


def test_declared_echo_checks_are_let_through(tmp_path, monkeypatch):
    from grader.instructor.leak_echoes import is_echo

    path = _ledger(tmp_path, monkeypatch)
    echoes = (("demo/test_x.py::test_y", "['x']", "x must come back unchanged"),)
    x = torch.randn(16, generator=torch.Generator().manual_seed(1))
    leakcheck.observe_launch("rank_fn", ({"x": x},), {}, None)
    leakcheck.compared(x.clone())
    found = leakcheck.findings(str(path))
    assert found and all(is_echo(f["test"], f["sent"], echoes) for f in found)
    assert not is_echo("demo/test_x.py::test_z", "['x']", echoes)


def test_inactive_ledger_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(leakcheck, "_path", None)
    leakcheck.compared(torch.randn(16))
    assert not leakcheck.active()


def test_a_launch_argument_named_as_an_answer_is_refused():
    leakcheck.refuse_answer_keys(({"x": torch.ones(2), "target": [1, 2]},), {}, None)
    for args, kwargs, rank_args in (
            (({"case": {"expected": 3}},), {}, None),
            ((), {"cases": [{"reference": "abc"}]}, None),
            ((), {}, [({"want": torch.ones(1)},)])):
        with pytest.raises(ValueError, match="ranks get inputs, never verdicts"):
            leakcheck.refuse_answer_keys(args, kwargs, rank_args)


def test_an_echo_is_recognised_inside_a_multi_implementation_session():
    from grader.instructor.leak_echoes import is_echo

    echoes = (("demo/test_x.py::test_y[world_size=2-a]", "['x']", "x comes back"),)
    assert is_echo("suites/demo/test_x.py::test_y[impl=mutant:demo/m-world_size=2-a]", "['x']",
                   echoes)
    assert is_echo("suites/demo/test_x.py::test_y[world_size=2-a]", "['x']", echoes)
    assert not is_echo("suites/demo/test_x.py::test_y[impl=dir2-world_size=4-a]", "['x']", echoes)


def test_a_shared_launch_is_filed_under_each_test_file_that_reads_it(tmp_path, monkeypatch):
    """A launch shared through `harness.cases.Memo` is made once, by whichever test asks first;
    a test of another file that reads it judges what it sent all the same."""
    from harness import launcher, observers
    from harness.cases import Memo
    from harness.tests import rankfns

    path = _ledger(tmp_path, monkeypatch)
    monkeypatch.setattr(observers, "_observers", [leakcheck.observe_launch])
    memo = Memo()
    x = torch.randn(16, generator=torch.Generator().manual_seed(2))

    def shared() -> object:
        return memo.get("run", lambda: launcher.launch(rankfns.echo, 1, args=({"x": x},),
                                                       impl="solutions").values[0])

    shared()  # made by grader/suites/demo/test_x.py::test_y
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "grader/suites/demo/test_z.py::test_w (call)")
    shared()  # read by another file's test, which compares with what the launch sent
    leakcheck.compared(x.clone())
    found = leakcheck.findings(str(path))
    assert [f["test"] for f in found] == ["grader/suites/demo/test_z.py::test_w"], found
    shared()  # read again: filed once per file, so one more comparison finds it once
    leakcheck.compared(x.clone())
    assert len(leakcheck.findings(str(path))) == 2
