"""The graph emulator keeps the rules of CUDA graphs; each test shows one rule.

Every rule test runs against the emulator (CPU tensors) and, where a GPU is present, against
real CUDA graphs with the same code, which shows the emulator agrees with CUDA. Tests of what
only the emulator promises (garbage before the first replay, its error on misuse) say so.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness import graphs
from harness.graphs import EmulatedGraph, GraphCaptureError, graph_capture, make_graph

NO_GPU = "needs a CUDA GPU: real CUDA graphs are checked against the emulator where one exists"


@pytest.fixture(params=["emulated", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason=NO_GPU))])
def backend(request) -> str:
    return request.param


def device_of(backend: str) -> torch.device:
    return torch.device("cuda" if backend == "cuda" else "cpu")


def new_graph(backend: str):
    return make_graph() if backend == "cuda" else EmulatedGraph()


def test_make_graph_picks_by_cuda_availability():
    graph = make_graph()
    if torch.cuda.is_available():
        assert isinstance(graph, torch.cuda.CUDAGraph)
    else:
        assert isinstance(graph, EmulatedGraph)


# -- rule 1: a replay reads the memory captured, not whatever a name points to later ----------
def test_replay_reads_what_the_static_input_holds_now(backend):
    x = torch.ones(4, device=device_of(backend))
    graph = new_graph(backend)
    with graph_capture(graph):
        y = x * 2 + 1
    x.copy_(torch.arange(4.0))
    graph.replay()
    assert y.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_a_rebound_input_is_not_seen(backend):
    device = device_of(backend)
    x = torch.full((3,), 5.0, device=device)
    graph = new_graph(backend)
    with graph_capture(graph):
        y = x + 1
    captured = x
    x = torch.zeros(3, device=device)  # rebinding the name: the graph still reads `captured`
    graph.replay()
    assert y.tolist() == [6.0, 6.0, 6.0]
    alive = captured[:]  # keeps the captured memory allocated (a GPU graph does not)
    captured.set_(torch.full((3,), 9.0, device=device))  # new memory for the same tensor object
    graph.replay()
    assert y.tolist() == [6.0, 6.0, 6.0], "a replay reads the capture-time memory"
    assert x.tolist() == [0.0, 0.0, 0.0] and alive.tolist() == [5.0, 5.0, 5.0]


# -- rule 2: outputs are the capture's tensors, overwritten by every replay --------------------
def test_outputs_are_overwritten_by_every_replay(backend):
    x = torch.zeros(2, device=device_of(backend))
    graph = new_graph(backend)
    with graph_capture(graph):
        y = x + 10
    kept, view = y, y[1:]
    for value in (1.0, 2.0):
        x.fill_(value)
        graph.replay()
        assert kept is y and y.tolist() == [10 + value] * 2 and view.tolist() == [10 + value]
    snapshot = y.clone()
    x.fill_(3.0)
    graph.replay()
    assert snapshot.tolist() == [12.0, 12.0], "a clone is the way to keep a result"


def test_indices_copied_into_a_static_index_buffer_steer_the_writes(backend):
    device = device_of(backend)
    cache = torch.zeros(2, 4, device=device)
    rows = torch.zeros(1, dtype=torch.long, device=device)
    cols = torch.zeros(1, dtype=torch.long, device=device)
    value = torch.zeros(1, device=device)
    graph = new_graph(backend)
    with graph_capture(graph):
        cache.index_put_((rows, cols), value)
    for row, col, v in ((1, 2, 5.0), (0, 3, 7.0)):
        rows.fill_(row)
        cols.fill_(col)
        value.fill_(v)
        graph.replay()
    assert cache.tolist() == [[0.0, 0.0, 0.0, 7.0], [0.0, 0.0, 5.0, 0.0]]


# -- rule 3: capture records work without doing it ---------------------------------------------
def test_capture_does_not_change_existing_tensors(backend):
    total = torch.zeros(3, device=device_of(backend))
    graph = new_graph(backend)
    with graph_capture(graph):
        total.add_(1)
    assert total.tolist() == [0.0, 0.0, 0.0], "capture must not run the in-place add"
    graph.replay()
    graph.replay()
    assert total.tolist() == [2.0, 2.0, 2.0]


def test_emulated_outputs_hold_garbage_until_the_first_replay():
    x = torch.ones(2)
    index = torch.zeros(2, dtype=torch.long)
    graph = EmulatedGraph()
    with graph_capture(graph):
        y = x * 3
        positions = index + 1
    assert all(math.isnan(v) for v in y.tolist())
    assert positions.tolist() == [torch.iinfo(torch.long).max] * 2
    graph.replay()
    assert y.tolist() == [3.0, 3.0] and positions.tolist() == [1, 1]


def test_a_captured_module_matches_eager(backend):
    device = device_of(backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)).to(device)
    static = torch.zeros(3, 8, device=device)
    with torch.no_grad():
        model(static)  # warm-up, as for a real CUDA graph
        graph = new_graph(backend)
        with graph_capture(graph):
            out = model(static)
        for seed in range(3):
            x = torch.randn(3, 8, generator=torch.Generator().manual_seed(seed)).to(device)
            static.copy_(x)
            graph.replay()
            torch.testing.assert_close(out, model(x))


# -- rule 4: host syncs during capture raise ---------------------------------------------------
HOST_SYNCS = {
    "item": lambda t: t.sum().item(),
    "float": lambda t: float(t[0]),
    "branch on a value": lambda t: 1 if (t > 0).any() else 0,
    "tolist": lambda t: t.tolist(),
    "print": lambda t: print(t),
    "nonzero": lambda t: t.nonzero(),
    "boolean mask": lambda t: t[t > 1],
}


@pytest.mark.parametrize("action", list(HOST_SYNCS))
def test_host_sync_during_capture_raises(backend, action):
    x = torch.arange(4.0, device=device_of(backend))
    graph = new_graph(backend)
    with pytest.raises(RuntimeError), graph_capture(graph):
        HOST_SYNCS[action](x)


def test_emulated_failed_capture_leaves_an_empty_graph_and_no_modes():
    x = torch.arange(3.0)
    graph = EmulatedGraph()
    # both statements belong in the block: the capture fails at the second, after the first
    with pytest.raises(GraphCaptureError, match="operation not permitted when stream is "  # noqa: PT012
                                                "capturing.*item"), graph_capture(graph):
        x.add_(1)
        x.sum().item()
    assert x.tolist() == [0.0, 1.0, 2.0], "the abandoned capture's writes are undone"
    with pytest.raises(RuntimeError, match="not been captured"):
        graph.replay()
    with graph_capture(graph):  # the same graph can capture after a failure
        y = x * 2
    graph.replay()
    assert y.tolist() == [0.0, 2.0, 4.0]


# -- rule 5: counters --------------------------------------------------------------------------
def test_watch_counts_captures_and_replays(backend):
    x = torch.ones(2, device=device_of(backend))
    with graphs.watch() as w:
        graph = new_graph(backend)
        with graph_capture(graph):
            x * 2
        for _ in range(3):
            graph.replay()
    assert (w.captures, w.replays) == (1, 3)
    totals = graphs.counters()
    assert totals.captures >= 1 and totals.replays >= 3


def test_a_replay_allocates_nothing_and_eager_ops_do(backend):
    x = torch.ones(4, device=device_of(backend))
    graph = new_graph(backend)
    with graph_capture(graph):
        y = (x * 2).exp() + 1
    with graphs.watch() as w:
        graph.replay()
        x.add_(1)             # in place: no allocation
        x[1:]                 # a view: no allocation
    assert w.allocated == []
    with graphs.watch() as w:
        z = y.clone()
    assert [(a.op, a.shape, a.dtype) for a in w.allocated] == [("clone", (4,), torch.float32)]
    assert z is not y


# -- emulator misuse ---------------------------------------------------------------------------
def test_emulated_graph_misuse_raises():
    graph = EmulatedGraph()
    with pytest.raises(RuntimeError, match="not been captured"):
        graph.replay()
    x = torch.ones(1)
    with graph_capture(graph):
        x + 1
    with pytest.raises(RuntimeError, match="already captured"), graph_capture(graph):
        pass
    other = EmulatedGraph()
    with pytest.raises(RuntimeError, match="another capture"), graph_capture(other), \
            graph_capture(EmulatedGraph()):
        pass
    graph.reset()
    with graph_capture(graph):
        y = x + 2
    graph.replay()
    assert y.tolist() == [3.0] and graph.num_ops == 1
