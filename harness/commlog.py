"""Per-rank communication log and forbidden-API guard (rank side).

`CommLog.install()` wraps the public `torch.distributed` functions (point-to-point and every
collective, in both `torch.distributed` and `torch.distributed.distributed_c10d`) and the
communication methods of `ProcessGroup`. Each call made by the code under test appends one
`CommRecord`; calls torch makes internally while serving a logged call are not logged again. A
call that the assignment's `Forbid` rule names raises `ForbiddenCallError` at once and stays in
the log, so the parent fails the test even if the rank swallowed the exception.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from harness import sidecar
from harness.errors import ForbiddenCallError


@dataclass(frozen=True, slots=True)
class CommRecord:
    """One communication call made by a rank. See docs/authoring.md for each field's meaning."""

    op: str
    peer: int | None = None
    group_ranks: tuple[int, ...] = ()
    numel: int = 0
    bytes: int = 0
    out_numel: int = 0
    dtype: str = ""
    async_op: bool = False
    batched: bool = False
    forbidden: bool = False
    label: str = ""

    def to_plain(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> CommRecord:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["group_ranks"] = tuple(int(r) for r in kwargs.get("group_ranks", ()))
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class _OpSpec:
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    peer: str | None = None
    group_peer: str | None = None


_P2P_SEND = _OpSpec(("tensor",), (), "dst", "group_dst")
_P2P_RECV = _OpSpec(("tensor",), (), "src", "group_src")
_GATHER_BASE = _OpSpec(("input_tensor",), ("output_tensor",))
_SCATTER_BASE = _OpSpec(("input",), ("output",))

# The public torch.distributed communication functions and where their tensors are.
OP_SPECS: dict[str, _OpSpec] = {
    "send": _P2P_SEND, "isend": _P2P_SEND, "recv": _P2P_RECV, "irecv": _P2P_RECV,
    "batch_isend_irecv": _OpSpec(),
    "broadcast": _OpSpec(("tensor",), (), "src", "group_src"),
    "all_reduce": _OpSpec(("tensor",)),
    "reduce": _OpSpec(("tensor",), (), "dst", "group_dst"),
    "all_gather": _OpSpec(("tensor",), ("tensor_list",)),
    "all_gather_into_tensor": _GATHER_BASE, "_all_gather_base": _GATHER_BASE,
    "all_gather_single": _GATHER_BASE,
    "gather": _OpSpec(("tensor",), ("gather_list",), "dst", "group_dst"),
    "scatter": _OpSpec(("scatter_list",), ("tensor",), "src", "group_src"),
    "reduce_scatter": _OpSpec(("input_list",), ("output",)),
    "reduce_scatter_tensor": _SCATTER_BASE, "_reduce_scatter_base": _SCATTER_BASE,
    "reduce_scatter_single": _SCATTER_BASE,
    "all_to_all": _OpSpec(("input_tensor_list",), ("output_tensor_list",)),
    "all_to_all_single": _OpSpec(("input",), ("output",)),
    "all_reduce_coalesced": _OpSpec(("tensors",)),
    "all_gather_coalesced": _OpSpec(("input_tensor_list",), ("output_tensor_lists",)),
    "barrier": _OpSpec(), "monitored_barrier": _OpSpec(),
    "broadcast_object_list": _OpSpec((), (), "src", "group_src"),
    "all_gather_object": _OpSpec(),
    "gather_object": _OpSpec((), (), "dst", "group_dst"),
    "scatter_object_list": _OpSpec((), (), "src", "group_src"),
    "send_object_list": _OpSpec((), (), "dst", "group_dst"),
    "recv_object_list": _OpSpec((), (), "src", "group_src"),
}

# ProcessGroup methods reach the backend directly; they are logged as "ProcessGroup.<name>".
PROCESS_GROUP_METHODS = (
    "allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "_allgather_base",
    "allgather_into_tensor_coalesced", "all_gather_single", "broadcast", "reduce", "gather",
    "scatter", "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single", "alltoall", "alltoall_base", "all_to_all_single", "barrier",
    "monitored_barrier", "send", "recv", "recv_anysource",
)


@functools.cache
def _signature(fn: Callable) -> inspect.Signature:
    """`inspect.signature(fn)`, computed once per function: worked out at import for every
    wrapped operation, in the forkserver that preloads this module, so no rank pays for it."""
    return inspect.signature(fn)


for _name in OP_SPECS:
    if getattr(c10d, _name, None) is not None:
        _signature(getattr(c10d, _name))

P2P_APIS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
COMMUNICATION_APIS = frozenset(OP_SPECS) | {f"ProcessGroup.{m}" for m in PROCESS_GROUP_METHODS}


@dataclass(frozen=True)
class Forbid:
    """Which communication APIs an assignment forbids, and the rule to quote when one is called.

    Either `apis` (the forbidden names) or `allow_only` (every other communication name is
    forbidden). Names are `torch.distributed` function names or "ProcessGroup.<method>".
    """

    apis: frozenset[str] = frozenset()
    allow_only: frozenset[str] | None = None
    rule: str = "this API is not allowed in this assignment"

    def __post_init__(self) -> None:
        object.__setattr__(self, "apis", frozenset(self.apis))
        if self.allow_only is not None:
            object.__setattr__(self, "allow_only", frozenset(self.allow_only))
        unknown = (self.apis | (self.allow_only or frozenset())) - COMMUNICATION_APIS
        if unknown:
            raise ValueError(f"Forbid names unknown APIs {sorted(unknown)}; "
                             f"known: {sorted(OP_SPECS)}")

    def forbids(self, op: str) -> bool:
        if self.allow_only is not None:
            return op not in self.allow_only
        return op in self.apis


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _size(values: Iterable[Any]) -> tuple[int, int, str]:
    numel = nbytes = 0
    dtype = ""
    for value in values:
        for t in _tensors(value):
            numel += t.numel()
            nbytes += t.numel() * t.element_size()
            dtype = dtype or str(t.dtype)
    return numel, nbytes, dtype


class CommLog:
    """The log of one rank. Install once per rank process, before the code under test runs."""

    def __init__(self, forbid: Forbid | None = None) -> None:
        self.records: list[CommRecord] = []
        self.forbid = forbid
        self._local = threading.local()
        self._group_ranks: dict[int, tuple[int, ...]] = {}

    # -- public -----------------------------------------------------------------------------
    def mark(self, label: str) -> None:
        self.records.append(CommRecord(op="mark", label=str(label)))
        sidecar.mark(label)  # labels the sidecar's wire records too (diagnostics)

    def install(self) -> None:
        for name, spec in OP_SPECS.items():
            original = getattr(c10d, name, None)
            if original is None:
                continue
            wrapper = self._wrap_function(name, spec, original)
            setattr(c10d, name, wrapper)
            if getattr(dist, name, None) is original:
                setattr(dist, name, wrapper)
        for method in PROCESS_GROUP_METHODS:
            original = getattr(dist.ProcessGroup, method, None)
            if original is None:
                continue
            try:
                setattr(dist.ProcessGroup, method, self._wrap_method(method, original))
            except (AttributeError, TypeError):  # some builds refuse; functions are still wrapped
                pass

    # -- internals --------------------------------------------------------------------------
    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _call_unlogged(self, original: Callable, args: tuple, kwargs: dict) -> Any:
        self._local.depth = self._depth() + 1
        try:
            return original(*args, **kwargs)
        finally:
            self._local.depth -= 1

    def _ranks_of(self, group: Any) -> tuple[int, ...]:
        group = group if group is not None else c10d._get_default_group()
        key = id(group)
        if key not in self._group_ranks:
            self._group_ranks[key] = tuple(dist.get_process_group_ranks(group))
        return self._group_ranks[key]

    def _peer(self, spec: _OpSpec, arguments: dict[str, Any]) -> int | None:
        if spec.peer and arguments.get(spec.peer) is not None:
            return int(arguments[spec.peer])
        if spec.group_peer and arguments.get(spec.group_peer) is not None:
            return self._ranks_of(arguments.get("group"))[int(arguments[spec.group_peer])]
        return None

    def _append(self, record: CommRecord) -> None:
        self.records.append(record)
        if record.forbidden:
            rule = self.forbid.rule if self.forbid else ""
            raise ForbiddenCallError(f"torch.distributed.{record.op} is forbidden here: {rule}")

    def _is_forbidden(self, op: str) -> bool:
        return self.forbid is not None and self.forbid.forbids(op)

    def _describe(self, name: str, spec: _OpSpec, arguments: dict[str, Any]) -> CommRecord:
        numel, nbytes, dtype = _size(arguments.get(p) for p in spec.inputs)
        out_numel, _, out_dtype = _size(arguments.get(p) for p in spec.outputs)
        try:
            group_ranks = self._ranks_of(arguments.get("group"))
        except Exception:  # noqa: BLE001 - an invalid group: torch raises its own error at the call
            group_ranks = ()
        return CommRecord(
            op=name, peer=self._peer(spec, arguments), group_ranks=group_ranks, numel=numel,
            bytes=nbytes, out_numel=out_numel if spec.outputs else numel,
            dtype=dtype or out_dtype, async_op=bool(arguments.get("async_op", False)),
            forbidden=self._is_forbidden(name))

    def _describe_batch(self, ops: Any) -> list[CommRecord]:
        records = []
        for p2p in ops or ():
            name = getattr(getattr(p2p, "op", None), "__name__", "p2p")
            tensor = getattr(p2p, "tensor", None)
            numel, nbytes, dtype = _size([tensor])
            group = getattr(p2p, "group", None)
            peer = getattr(p2p, "peer", None)
            if peer is None and getattr(p2p, "group_peer", None) is not None:
                peer = self._ranks_of(group)[int(p2p.group_peer)]
            records.append(CommRecord(
                op=name, peer=None if peer is None else int(peer),
                group_ranks=self._ranks_of(group), numel=numel, bytes=nbytes, out_numel=numel,
                dtype=dtype, async_op=True, batched=True,
                forbidden=self._is_forbidden(name) or self._is_forbidden("batch_isend_irecv")))
        return records

    def _wrap_function(self, name: str, spec: _OpSpec, original: Callable) -> Callable:
        signature = _signature(original)

        @functools.wraps(original)
        def logged(*args: Any, **kwargs: Any) -> Any:
            if self._depth() > 0:
                return original(*args, **kwargs)
            try:
                arguments = signature.bind(*args, **kwargs).arguments
            except TypeError:
                return original(*args, **kwargs)  # torch raises its own, clearer, TypeError
            if name == "batch_isend_irecv":
                for record in self._describe_batch(arguments.get("p2p_op_list")):
                    self._append(record)
            else:
                self._append(self._describe(name, spec, arguments))
            return self._call_unlogged(original, args, kwargs)

        del logged.__wrapped__  # no easy way back to the unlogged function
        return logged

    def _wrap_method(self, method: str, original: Callable) -> Callable:
        name = f"ProcessGroup.{method}"

        def logged(pg: Any, *args: Any, **kwargs: Any) -> Any:
            if self._depth() > 0:
                return original(pg, *args, **kwargs)
            numel, nbytes, dtype = _size(list(args) + list(kwargs.values()))
            self._append(CommRecord(op=name, numel=numel, bytes=nbytes, out_numel=numel,
                                    dtype=dtype, forbidden=self._is_forbidden(name)))
            return self._call_unlogged(original, (pg, *args), kwargs)

        logged.__name__ = method
        return logged


def windows(records: Iterable[CommRecord], prefix: str = "") -> dict[str, list[CommRecord]]:
    """One rank's log cut at its marks: label -> the records after that mark, up to the next.

    Only marks whose label starts with `prefix` open a window (every mark, by default); other
    marks stay inside the window as records. A label marked twice collects both windows.
    E.g. `windows(result.comm[r], "step ")["step 2"]` is what rank r did in step 2.
    """
    out: dict[str, list[CommRecord]] = {}
    current: list[CommRecord] | None = None
    for record in records:
        if record.op == "mark" and record.label.startswith(prefix):
            current = out.setdefault(record.label, [])
        elif current is not None:
            current.append(record)
    return out


__all__ = ["COMMUNICATION_APIS", "P2P_APIS", "CommLog", "CommRecord", "Forbid", "as_log", "windows"]


def as_log(wire: Sequence[sidecar.WireRecord]) -> list[CommRecord]:
    """What the sidecar carried for one rank, as a communication log (`CommRecord`s, with a
    "mark" wherever the rank's label changes), so that suites written against the in-rank log
    (`harness.commlog.windows`) judge the wire instead. Operations, sizes and order are the
    wire's (dtypes spelt as the in-rank log spells them, "torch.float32"); the phases come from
    the rank's marks, which only label records (a phase with no operation has no window)."""
    out: list[CommRecord] = []
    label: str | None = None
    for record in wire:
        if record.label != label:
            label = record.label
            out.append(CommRecord(op="mark", label=label))
        size = sidecar._ELEMENT_SIZE.get(record.dtype, 1)
        out.append(CommRecord(op=sidecar._LOG_NAME.get(record.kind, record.kind), peer=record.peer,
                              group_ranks=record.group_ranks, numel=record.bytes // size,
                              bytes=record.bytes,
                              out_numel=(record.out_bytes if record.kind.startswith("alltoall")
                                         else record.bytes) // size,
                              dtype=f"torch.{record.dtype}" if record.dtype else ""))
    return out
