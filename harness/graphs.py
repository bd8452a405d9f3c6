"""CUDA graphs anywhere: `make_graph()`, `graph_capture(graph)`, and counters tests can read.

On a GPU `make_graph()` returns a `torch.cuda.CUDAGraph`; on a CPU-only machine it returns an
`EmulatedGraph` used the same way, so code written for CUDA graphs runs and is graded on CPU:

    graph = make_graph()
    with graph_capture(graph):
        static_out = model(static_in)     # recorded, not run for real
    static_in.copy_(next_input)           # inputs go into the capture-time buffers
    graph.replay()                        # static_out now holds model(next_input)

The emulator records the aten operations run during capture (a `TorchDispatchMode`) and replays
them in order on the memory they touched, which keeps the rules that matter:

1. A replay reads the tensors that existed at capture time. Rebinding a name later
   (`self.x = new`) is not seen; inputs must be `copy_`-ed into the static buffers.
2. The outputs are the tensors created during capture; every replay overwrites them.
3. Capture records work without doing it: tensors that existed before capture are unchanged by
   it, and tensors created during capture hold garbage (NaN, or the dtype's max) until the
   first replay. Hence the eager warm-up before capture.
4. Reading a value on the host during capture (`.item()`, `float()`, `bool()`, `if t.any():`,
   `.tolist()`, `.numpy()`, printing, `nonzero`, boolean-mask indexing, `unique`, ...) raises
   `GraphCaptureError`, a `RuntimeError` like CUDA's "operation not permitted when stream is
   capturing". The capture is abandoned and the graph stays empty.
5. `counters()` counts captures and replays; inside `watch()`, the tensors that aten ops
   allocate outside captures and replays are listed too. A replay allocates nothing, as on a
   GPU (the emulator's own temporaries are not counted).

Not modelled: launch costs (an emulated replay is no faster than eager), memory pools shared
between graphs, streams, the CUDA RNG offsets, and the device boundary: everything is on the
CPU, so work the emulator records that a GPU capture would have run once on the host (CPU
tensor ops) is replayed too. Single-threaded use only.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

__all__ = [
    "AllocatedTensor", "EmulatedGraph", "GraphCaptureError", "GraphCounters", "GraphWatch",
    "counters", "graph_capture", "make_graph", "reset_counters", "watch",
]

CUDA_CAPTURE_MESSAGE = "operation not permitted when stream is capturing"

# Python-level tensor methods that hand a value to the host (seen by a TorchFunctionMode).
HOST_READ_METHODS = frozenset({
    "item", "tolist", "numpy", "__array__", "__bool__", "__int__", "__float__", "__index__",
    "__complex__", "__repr__", "__format__", "__dlpack__",
})
# aten ops that need a value on the host: a scalar out, or an output shape set by the data.
SYNC_OPS = frozenset({
    "_local_scalar_dense", "item", "is_nonzero", "equal", "allclose", "nonzero", "nonzero_numpy",
    "argwhere", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive",
    "unique_dim_consecutive", "bincount",
})
# aten ops with non-tensor results that only read metadata: no sync.
METADATA_OPS = frozenset({
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel",
    "dim", "is_same_size", "is_contiguous", "is_complex", "is_floating_point", "_nnz",
    "is_set_to", "result_type", "can_cast", "promote_types", "is_pinned",
})
# In-place ops that change a tensor's metadata, not its data: nothing to replay.
METADATA_INPLACE_OPS = frozenset({
    "set_", "resize_", "resize_as_", "unsqueeze_", "squeeze_", "transpose_", "t_",
    "as_strided_", "swapdims_", "swapaxes_", "detach_", "requires_grad_",
})


class GraphCaptureError(RuntimeError):
    """A host sync (or another forbidden action) during an emulated capture."""


@dataclass(frozen=True)
class GraphCounters:
    """Totals since the process started (or `reset_counters()`)."""

    captures: int = 0  # captures completed through graph_capture
    replays: int = 0   # replay() calls


@dataclass(frozen=True)
class AllocatedTensor:
    """One tensor an aten op allocated while a `watch()` was open."""

    op: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: str


@dataclass
class _State:
    captures: int = 0
    replays: int = 0
    capturing: bool = False
    internal: int = 0


_STATE = _State()


def counters() -> GraphCounters:
    """Captures and replays so far, for real CUDA graphs and emulated ones alike."""
    return GraphCounters(captures=_STATE.captures, replays=_STATE.replays)


def reset_counters() -> None:
    _STATE.captures = 0
    _STATE.replays = 0


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Run the emulator's own work unseen by any mode, without autograd."""
    _STATE.internal += 1
    try:
        with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.inference_mode():
            yield
    finally:
        _STATE.internal -= 1


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors
        return None


def _tensors(tree: Any, found: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The tensors in nested tuples/lists/dicts, in order (pytree is slow on hot paths)."""
    found = [] if found is None else found
    if isinstance(tree, torch.Tensor):
        found.append(tree)
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            _tensors(item, found)
    elif isinstance(tree, dict):
        for item in tree.values():
            _tensors(item, found)
    return found


def _map_tensors(tree: Any, fn: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_tensors(item, fn) for item in tree)
    if isinstance(tree, dict):
        return {key: _map_tensors(item, fn) for key, item in tree.items()}
    return tree


def _op_name(func: Any) -> str:
    return func.overloadpacket.__name__


def _sync_reason(func: Any, args: tuple, kwargs: dict) -> str | None:
    """Why `func` would need a host sync on a GPU, or None."""
    name = _op_name(func)
    if name in SYNC_OPS:
        return f"aten.{name} needs a value (or a data-dependent shape) on the host"
    if name == "repeat_interleave" and func._overloadname in ("Tensor", "self_Tensor") \
            and kwargs.get("output_size") is None:
        return "aten.repeat_interleave with tensor repeats and no output_size sizes its " \
               "output from the data"
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
               for i in indices or ()):
            return "indexing with a boolean mask sizes its output from the data (use " \
                   "torch.where or masked_fill)"
    if name not in METADATA_OPS and any("Tensor" not in str(r.type)
                                        for r in func._schema.returns):
        return f"aten.{name} returns a host value"
    return None


def _written_tensors(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensor arguments `func` writes to (`Tensor(a!)` in its schema)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        written += _tensors(value)
    return written


def _poison(t: torch.Tensor) -> None:
    if t.dtype.is_floating_point or t.dtype.is_complex:
        t.fill_(math.nan)
    elif t.dtype != torch.bool:
        t.fill_(torch.iinfo(t.dtype).max)


@dataclass
class _Op:
    func: Any
    args: tuple
    kwargs: dict
    fresh: list[tuple[int, torch.Tensor]]  # (index among the output's tensors, target)


@dataclass
class _Recording:
    """What one capture saw: ops, aliases of the memory they touched, undo information."""

    ops: list[_Op] = field(default_factory=list)
    aliases: dict[tuple, torch.Tensor] = field(default_factory=dict)
    created: set[int] = field(default_factory=set)        # storages allocated during capture
    snapshots: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = \
        field(default_factory=dict)                       # pre-existing storages written

    def alias(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor on `t`'s memory with `t`'s metadata now: what the graph will read."""
        key = (_storage_key(t), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if key not in self.aliases:
            with _quiet():
                self.aliases[key] = torch.empty(0, dtype=t.dtype, device=t.device).set_(
                    t.untyped_storage(), t.storage_offset(), t.shape, t.stride())
        return self.aliases[key]

    def undo_later(self, t: torch.Tensor) -> None:
        key = _storage_key(t)
        if key is None or key in self.created or key in self.snapshots:
            return
        with _quiet():
            storage = t.untyped_storage()
            self.snapshots[key] = (storage, storage.clone())

    def finish(self) -> None:
        """Undo the capture's writes to old memory; leave garbage in what it created."""
        with _quiet():
            for storage, saved in self.snapshots.values():
                storage.copy_(saved)
            for op in self.ops:
                for _, target in op.fresh:
                    _poison(target)
        self.snapshots.clear()


class _Recorder(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else the first op imports torch._dynamo (seconds) to disable it here

    def __init__(self, recording: _Recording) -> None:
        super().__init__()
        self.recording = recording

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        reason = _sync_reason(func, args, kwargs)
        if reason is not None:
            raise GraphCaptureError(f"{CUDA_CAPTURE_MESSAGE} (emulated CUDA graph): {reason}; "
                                    "no host syncs inside a captured region")
        name = _op_name(func)
        if name in METADATA_INPLACE_OPS or name in METADATA_OPS:
            return func(*args, **kwargs)
        rec = self.recording
        written = _written_tensors(func, args, kwargs)
        for t in written:
            rec.undo_later(t)
        inputs = {_storage_key(t) for t in _tensors((args, kwargs))}
        spec_args, spec_kwargs = _map_tensors((args, kwargs), rec.alias)
        out = func(*args, **kwargs)
        fresh = []
        for i, t in enumerate(_tensors(out)):
            key = _storage_key(t)
            if key is not None and key not in inputs:
                rec.created.add(key)
                fresh.append((i, rec.alias(t)))
        if written or fresh:
            rec.ops.append(_Op(func, spec_args, spec_kwargs, fresh))
        return out


class _HostReadGuard(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READ_METHODS:
            raise GraphCaptureError(
                f"{CUDA_CAPTURE_MESSAGE} (emulated CUDA graph): Tensor.{name} reads a value on "
                "the host; compute with tensor ops instead (torch.where, clamp, masks)")
        return func(*args, **(kwargs or {}))


class EmulatedGraph:
    """A CPU stand-in for `torch.cuda.CUDAGraph`: capture_begin/capture_end, replay, reset.

    Capture through `graph_capture(graph)`. Raises RuntimeError on a replay before a capture,
    a second capture without `reset()`, or a capture inside another capture.
    """

    def __init__(self) -> None:
        self._recording: _Recording | None = None
        self._modes: list[Any] = []
        self._captured = False

    @property
    def num_ops(self) -> int:
        """Recorded aten ops that do work (views and metadata ops are not replayed)."""
        return len(self._recording.ops) if self._recording and self._captured else 0

    def capture_begin(self) -> None:
        if self._captured or self._modes:
            raise RuntimeError("this graph is already captured; call reset() to capture again")
        if _STATE.capturing:
            raise RuntimeError("cannot begin a capture while another capture is running")
        self._recording = _Recording()
        self._modes = [_HostReadGuard(), _Recorder(self._recording)]
        for mode in self._modes:
            mode.__enter__()
        _STATE.capturing = True

    def capture_end(self) -> None:
        if not self._modes:
            raise RuntimeError("capture_end() without capture_begin()")
        self._stop()
        assert self._recording is not None  # set by capture_begin, which _modes proves ran
        self._recording.finish()
        self._captured = True

    def abort_capture(self) -> None:
        """Leave a failed capture: undo its writes and keep the graph empty."""
        if self._modes:
            self._stop()
        if self._recording is not None:
            self._recording.finish()
        self._recording, self._captured = None, False

    def _stop(self) -> None:
        _STATE.capturing = False
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        self._modes = []

    def replay(self) -> None:
        """Run the recorded ops again, in order, on the capture-time memory."""
        if not self._captured:
            raise RuntimeError("replay() of a graph that has not been captured")
        if _STATE.capturing:
            raise RuntimeError("the graph emulator cannot replay a graph inside a capture")
        _STATE.replays += 1
        assert self._recording is not None  # a captured graph keeps its recording
        with _quiet():
            for op in self._recording.ops:
                out = op.func(*op.args, **op.kwargs)
                if op.fresh:
                    results = _tensors(out)
                    for i, target in op.fresh:
                        target.copy_(results[i])

    def reset(self) -> None:
        """Forget the recording (and the memory it held), so the graph can capture again."""
        if self._modes:
            raise RuntimeError("reset() during a capture")
        self._recording, self._captured = None, False


@functools.cache
def _counted_cuda_graph_class() -> type:
    class CountedCUDAGraph(torch.cuda.CUDAGraph):
        """`torch.cuda.CUDAGraph` whose replays show in `counters()`."""

        def replay(self) -> None:
            _STATE.replays += 1
            super().replay()

    return CountedCUDAGraph


def make_graph() -> Any:
    """A `torch.cuda.CUDAGraph` when CUDA is available, else an `EmulatedGraph`.

    Tensors captured into a CUDA graph must be on the GPU (CPU work during a CUDA capture runs
    once and is not replayed); use `EmulatedGraph()` directly for CPU tensors on a GPU machine.
    """
    if torch.cuda.is_available():
        return _counted_cuda_graph_class()()
    return EmulatedGraph()


@contextlib.contextmanager
def graph_capture(graph: Any) -> Iterator[Any]:
    """Capture the block's GPU work into `graph` (a CUDAGraph or an EmulatedGraph).

    For CUDA graphs this is `torch.cuda.graph(graph)` (side stream, sync, private pool). On an
    exception the capture is abandoned and the exception propagates.
    """
    if isinstance(graph, EmulatedGraph):
        graph.capture_begin()
        try:
            yield graph
        except BaseException:
            graph.abort_capture()
            raise
        graph.capture_end()
    else:
        if _STATE.capturing:
            raise RuntimeError("cannot begin a capture while another capture is running")
        with torch.cuda.graph(graph):
            _STATE.capturing = True
            try:
                yield graph
            finally:
                _STATE.capturing = False
    _STATE.captures += 1


class GraphWatch(TorchDispatchMode):
    """Counts captures, replays and allocations while open; see `watch()`."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # see _Recorder

    def __init__(self) -> None:
        super().__init__()
        self.allocated: list[AllocatedTensor] = []
        self._start = counters()

    @property
    def captures(self) -> int:
        return _STATE.captures - self._start.captures

    @property
    def replays(self) -> int:
        return _STATE.replays - self._start.replays

    @property
    def allocations(self) -> int:
        return len(self.allocated)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _STATE.capturing or _STATE.internal:
            return out
        inputs = {_storage_key(t) for t in _tensors((args, kwargs))}
        for t in _tensors(out):
            key = _storage_key(t)
            if key is not None and key not in inputs:
                self.allocated.append(AllocatedTensor(op=_op_name(func), shape=tuple(t.shape),
                                                      dtype=t.dtype, device=str(t.device)))
        return out


@contextlib.contextmanager
def watch() -> Iterator[GraphWatch]:
    """Count what the block does: `w.captures`, `w.replays`, `w.allocated` (AllocatedTensor).

    Allocations are the tensors aten ops return on fresh memory (views and in-place results
    are not allocations), outside captures and replays.
    """
    w = GraphWatch()
    with w:
        yield w
