"""Communication outside the rank: a per-rank sidecar process carries and logs its traffic.

With `launch(..., transport="sidecar")` the rank's `torch.distributed` backend is
`SidecarGroup`, a Python `ProcessGroup` that holds no gloo context and opens no network
socket: every operation (send, recv, all_reduce, broadcast, all_gather(_into_tensor),
reduce_scatter(_tensor), all_to_all(_single), gather, scatter, reduce, barrier, on the
default group or any `new_group`) goes as a request
with the tensor's bytes over one Unix socket to this rank's sidecar. The sidecars are forked
by a small server (`SidecarServer`, torch preloaded, outside the sandbox), run the real gloo
operations with each other, and keep the wire log: one `WireRecord` per backend operation —
kind, peer, group, bytes — written where the rank cannot write (a 0700 folder of the parent's
user, outside the sandbox's file system). The rank cannot forge, hide or reorder those
records: the parent judges forbidden operations and checks the rank's own communication log
against them (`check_against_wire`).

What the sidecar sees is the backend operation, not the public function the rank called: an
`isend` and a `send` are both "send"; `all_gather_object` is several operations. The rank's own
log (harness/commlog.py) keeps the public names, for messages and for style rules; the wire
log is what decides bytes, messages and forbidden collectives.

When a case raises on one rank while its peers wait in an operation with it (harness.cases),
the rank asks its sidecar to `abort`: the sidecar shuts its connections to the other sidecars,
so the peers' pending operations fail and their ranks get the error; those operations are
marked `aborted` in the wire log. Then every rank asks its sidecar to `reset` (forget its
groups) and builds its process group again.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from harness import rankfiles, tempdirs

if TYPE_CHECKING:
    from torch.distributed.distributed_c10d import GroupName

BACKEND = "mlsys-sidecar"
_HEADER = struct.Struct("!II")  # json length, payload length
_REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG")
CONNECT_TIMEOUT_S = 60.0
ANY_SOURCE = -1  # the peer of a receive from any source, on the socket
TOKEN_CHARS = 64  # a rank's token: 32 random bytes, in hex (`new_token`)
HANDSHAKE_S = 5.0  # how long a new connection may take to present it
# The sidecar runs outside the sandbox and reads what the rank sends: every frame is capped
# before anything is allocated, and dtypes come from a fixed table, never from getattr.
MAX_HEADER_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024  # the rank's own file-size cap (launcher.MAX_FILE_BYTES)
MAX_PENDING = 256  # operations posted and not yet waited for
WIRE_LOG_BYTES = 64 * 1024 * 1024  # a sidecar's wire log, read with this cap
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


class WireMismatchError(RuntimeError):
    """The rank's communication log disagrees with what its sidecar carried."""


@dataclass(frozen=True)
class WireRecord:
    """One backend operation a sidecar carried for its rank.

    `kind`: "send", "recv", "allreduce", "broadcast", "allgather", "allgather_base",
    "reduce_scatter", "reduce_scatter_base", "gather", "scatter", "reduce", "alltoall",
    "alltoall_base" or "barrier"; `peer`: the other global rank of a point-to-point operation
    (the root of a broadcast, gather, scatter or reduce); `group_ranks`: global ranks of the
    group, `bytes`: what the rank handed over (sends, collective inputs) or asked for (recv).

    All-to-alls (and a scatter's root): `peer_bytes[i]`, the bytes the rank sent to group rank
    i (its own slot included: it never crosses the wire, and judges subtract it); all-to-alls:
    `out_bytes`, what the rank received in all, its own slot included.

    `aborted`: the operation did not complete (gloo raised in it, or it was still pending when
    its group was rebuilt after a case's abort, see `abort`): the rank asked for it, but it is
    not traffic that happened. The launch's `wire` leaves such records out (`carried`); they
    still count for forbidden operations and against the rank's own log.
    """

    kind: str
    peer: int | None
    group_ranks: tuple[int, ...]
    bytes: int
    dtype: str
    label: str = ""  # the rank's latest mark when it happened (diagnostics only)
    peer_bytes: tuple[int, ...] = ()
    out_bytes: int = 0
    aborted: bool = False


# -- framing ----------------------------------------------------------------------------------
def _send_frame(sock: socket.socket, header: dict[str, Any],
                payloads: Sequence[torch.Tensor] = ()) -> None:
    data = json.dumps(header).encode()
    views = [_bytes_of(t) for t in payloads]
    sock.sendall(_HEADER.pack(len(data), sum(v.nbytes for v in views)) + data)
    for view in views:
        sock.sendall(view)


def _recv_exact(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise EOFError("sidecar connection closed")
        got += n
    return buffer


def _recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytearray]:
    json_len, payload_len = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if json_len > MAX_HEADER_BYTES or payload_len > MAX_PAYLOAD_BYTES:
        raise ConnectionError(f"frame of {json_len} + {payload_len} bytes is over the caps")
    header = json.loads(_recv_exact(sock, json_len).decode())
    if not isinstance(header, dict):
        raise ConnectionError("a frame's header must be a JSON object")
    return header, _recv_exact(sock, payload_len)


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    return memoryview(flat.numpy()).cast("B")  # type: ignore[arg-type]


def _describe(tensors: Iterable[torch.Tensor]) -> list[dict[str, Any]]:
    return [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
            for t in tensors]


def _checked(specs: Any) -> list[tuple[list[int], torch.dtype]]:
    """(shape, dtype) of each tensor description (they come from the rank): known dtypes only,
    and all of them together within the payload cap, checked before anything is allocated."""
    if not isinstance(specs, list) or len(specs) > 1024:
        raise ValueError("an operation takes a list of at most 1024 tensors")
    out, total = [], 0
    for spec in specs:
        dtype = DTYPES.get(str(spec.get("dtype"))) if isinstance(spec, dict) else None
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if dtype is None or not isinstance(shape, list) or len(shape) > 16 or \
                not all(isinstance(n, int) and 0 <= n < 2**40 for n in shape):
            raise ValueError(f"bad tensor description {str(spec)[:200]}")
        numel = 1
        for n in shape:
            numel *= n
        total += numel * dtype.itemsize
        out.append((shape, dtype))
    if total > MAX_PAYLOAD_BYTES:
        raise ValueError(f"{total} bytes in one operation is over the sidecar's cap")
    return out


def _tensors_from(specs: Any, payload: bytearray) -> list[torch.Tensor]:
    out, offset = [], 0
    for shape, dtype in _checked(specs):
        t = torch.zeros(shape, dtype=dtype)
        n = t.numel() * t.element_size()
        if n and len(payload) >= offset + n:  # a recv sends shapes only
            t.view(-1).view(torch.uint8).copy_(
                torch.frombuffer(payload, dtype=torch.uint8, count=n, offset=offset))
        out.append(t)
        offset += n
    return out


def _fill(targets: Sequence[torch.Tensor], payload: bytearray) -> None:
    received = _tensors_from(_describe(targets), payload)
    for target, value in zip(targets, received):
        target.copy_(value)


# -- rank side --------------------------------------------------------------------------------
class _Client:
    """The rank's one connection to its sidecar (requests are answered in order)."""

    def __init__(self, path: str, token: str) -> None:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                break
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.002)
        sock.sendall(token.encode("ascii"))  # who we are: the token only our job carried
        self.sock = sock
        self.next_id = 0
        self.label = ""

    def call(self, header: dict[str, Any], payloads: Sequence[torch.Tensor] = ()
             ) -> tuple[dict[str, Any], bytearray]:
        header = {**header, "label": self.label}
        _send_frame(self.sock, header, payloads)
        reply, payload = _recv_frame(self.sock)
        if "error" in reply:
            raise RuntimeError(f"sidecar: {reply['error']}")
        return reply, payload


class SidecarWork(dist.Work):
    """A pending operation: `wait()` asks the sidecar for its completion (and received data)."""

    def __init__(self, client: _Client | None = None, work_id: int = -1,
                 targets: Sequence[torch.Tensor] = ()) -> None:
        super().__init__()
        self.client, self.work_id, self.targets = client, work_id, list(targets)
        self.done = client is None
        self.source: int | None = None  # a receive from any source: who sent (group rank)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        if not self.done and self.client is not None:
            reply, payload = self.client.call({"op": "wait", "id": self.work_id})
            if self.targets:
                _fill(self.targets, payload)
            if "source" in reply:
                self.source = int(reply["source"])
            self.done = True
        return True

    def _source_rank(self) -> int:
        self.wait()
        if self.source is None:
            raise RuntimeError("sidecar transport: not a receive from any source")
        return self.source

    def is_completed(self) -> bool:
        return self.done

    def is_success(self) -> bool:
        return self.done

    def get_future(self) -> torch.futures.Future:
        self.wait()
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(self.targets)
        return future


def _reduce_name(op: Any) -> str:
    for name in _REDUCE_OPS:
        if op == getattr(dist.ReduceOp, name):
            return name
    raise ValueError(f"reduce op {op} is not supported by the sidecar transport")


class SidecarGroup(dist.ProcessGroup):
    """A process group whose every operation is carried by the rank's sidecar."""

    def __init__(self, client: _Client, group_id: str, rank: int, size: int,
                 global_ranks: Sequence[int], timeout_s: float | None = None) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self.client, self.gid, self.timeout_s = client, group_id, timeout_s
        client.call({"op": "group", "gid": group_id, "rank": rank, "size": size,
                     "ranks": list(global_ranks), "timeout_s": timeout_s})

    def getBackendName(self) -> str:
        return BACKEND

    # A Python ProcessGroup has no C++ backend to keep its name: keep it here, so device
    # meshes (FSDP2, DTensor) can name and resolve the group.
    def _set_group_name(self, name: GroupName) -> None:
        self._sidecar_group_name = name

    @property
    def group_name(self) -> GroupName:
        return self._sidecar_group_name

    # The group is its own backend (c10d keeps a Python group as it is): code that asks for the
    # backend object gets this group, whose every operation is carried, never a gloo context.
    def _get_backend(self, device: Any = None) -> SidecarGroup:  # type: ignore[override]
        return self

    # What torch asks of a backend object before using an optional feature: none here.
    supports_coalescing = supports_splitting = supports_time_estimate = False

    def supports_tensor_alloc(self, device: Any = None) -> bool:
        return False

    def _post(self, header: dict[str, Any], payloads: Sequence[torch.Tensor],
              targets: Sequence[torch.Tensor]) -> SidecarWork:
        self.client.next_id += 1
        work_id = self.client.next_id
        self.client.call({**header, "gid": self.gid, "id": work_id}, payloads)
        return SidecarWork(self.client, work_id, targets)

    def _now(self, header: dict[str, Any], payloads: Sequence[torch.Tensor],
             targets: Sequence[torch.Tensor]) -> SidecarWork:
        _, payload = self.client.call({**header, "gid": self.gid}, payloads)
        if targets:
            _fill(targets, payload)
        return SidecarWork(targets=targets)  # done; its future holds the outputs, as gloo's

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> SidecarWork:
        return self._post({"op": "send", "peer": dst, "tag": tag,
                           "tensors": _describe(tensors)}, tensors, ())

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> SidecarWork:
        return self._post({"op": "recv", "peer": src, "tag": tag,
                           "tensors": _describe(tensors)}, (), tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> SidecarWork:
        """`dist.recv(t)` / `dist.irecv(t)` with no source: whoever sends first."""
        return self._post({"op": "recv", "peer": ANY_SOURCE, "tag": tag,
                           "tensors": _describe(tensors)}, (), tensors)

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> SidecarWork:  # type: ignore[override]
        reduce = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._now({"op": "allreduce", "reduce": reduce, "tensors": _describe(tensors)},
                         tensors, tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> SidecarWork:  # type: ignore[override]
        root = opts.rootRank if opts is not None else 0
        return self._now({"op": "broadcast", "peer": root, "tensors": _describe(tensors)},
                         tensors, tensors)

    def allgather(self, output_tensors: list[list[torch.Tensor]],  # type: ignore[override]
                  input_tensors: list[torch.Tensor], opts: Any = None) -> SidecarWork:
        outs = output_tensors[0]
        return self._now({"op": "allgather", "tensors": _describe(input_tensors),
                          "outputs": _describe(outs)}, input_tensors, outs)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts: Any = None) -> SidecarWork:
        return self._now({"op": "allgather_base", "tensors": _describe([input]),
                          "outputs": _describe([output])}, [input], [output])

    def reduce_scatter(self, output_tensors: list[torch.Tensor],  # type: ignore[override]
                       input_tensors: list[list[torch.Tensor]], opts: Any = None
                       ) -> SidecarWork:
        reduce = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        inputs = input_tensors[0]
        return self._now({"op": "reduce_scatter", "reduce": reduce,
                          "tensors": _describe(inputs), "outputs": _describe(output_tensors)},
                         inputs, output_tensors)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor,
                             opts: Any = None) -> SidecarWork:
        reduce = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._now({"op": "reduce_scatter_base", "reduce": reduce,
                          "tensors": _describe([input]), "outputs": _describe([output])},
                         [input], [output])

    def barrier(self, opts: Any = None) -> SidecarWork:
        return self._now({"op": "barrier"}, (), ())

    def gather(self, output_tensors: list[list[torch.Tensor]],  # type: ignore[override]
               input_tensors: list[torch.Tensor], opts: Any = None) -> SidecarWork:
        root = opts.rootRank if opts is not None else 0
        outs = output_tensors[0] if output_tensors else []
        return self._now({"op": "gather", "peer": root, "tensors": _describe(input_tensors),
                          "outputs": _describe(outs)}, input_tensors, outs)

    def scatter(self, output_tensors: list[torch.Tensor],  # type: ignore[override]
                input_tensors: list[list[torch.Tensor]], opts: Any = None) -> SidecarWork:
        """`dist.scatter` (torch.distributed.nn's all-to-all reaches it on gloo)."""
        root = opts.rootRank if opts is not None else 0
        ins = input_tensors[0] if input_tensors else []
        return self._now({"op": "scatter", "peer": root, "tensors": _describe(ins),
                          "outputs": _describe(output_tensors)}, ins, output_tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> SidecarWork:  # type: ignore[override]
        root = opts.rootRank if opts is not None else 0
        reduce = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._now({"op": "reduce", "peer": root, "reduce": reduce,
                          "tensors": _describe(tensors)}, tensors, tensors)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # type: ignore[override]
                      output_split_sizes: Sequence[int], input_split_sizes: Sequence[int],
                      opts: Any = None) -> SidecarWork:
        """`dist.all_to_all_single` (torch >= 2.9 reaches it as `all_to_all_single`): splits
        along dim 0, equal where the lists are empty."""
        return self._now({"op": "alltoall_base", "tensors": _describe([input]),
                          "outputs": _describe([output]),
                          "out_splits": [int(n) for n in output_split_sizes],
                          "in_splits": [int(n) for n in input_split_sizes]},
                         [input], [output])

    def alltoall(self, output_tensors: list[torch.Tensor],  # type: ignore[override]
                 input_tensors: list[torch.Tensor], opts: Any = None) -> SidecarWork:
        """`dist.all_to_all`: input_tensors[i] goes to group rank i, output_tensors[i] comes
        from it; all of one shape, as gloo requires (the sidecar carries it as one
        all_to_all_single)."""
        return self._now({"op": "alltoall", "tensors": _describe(input_tensors),
                          "outputs": _describe(output_tensors)}, input_tensors, output_tensors)

    # The coalesced forms (functional collectives and DTensor reach the group through them):
    # one operation per tensor, in order. A Python group that lacks one of the methods the
    # communication log wraps on dist.ProcessGroup would have the wrapper found as its
    # override, and recurse.
    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],  # type: ignore[override]
                                        inputs: list[torch.Tensor],
                                        opts: Any = None) -> SidecarWork:
        for output, input in zip(outputs, inputs):
            self._allgather_base(output, input, opts)
        return SidecarWork(targets=outputs)

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],  # type: ignore[override]
                                        inputs: list[torch.Tensor],
                                        opts: Any = None) -> SidecarWork:
        for output, input in zip(outputs, inputs):
            self._reduce_scatter_base(output, input, opts)
        return SidecarWork(targets=outputs)

    def allreduce_coalesced(self, tensors: list[torch.Tensor],  # type: ignore[override]
                            opts: Any = None) -> SidecarWork:
        for tensor in tensors:
            self.allreduce([tensor], opts)
        return SidecarWork(targets=tensors)

    # torch >= 2.9 routes all_gather_into_tensor / reduce_scatter_tensor here
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base  # type: ignore[assignment]
    all_to_all_single = alltoall_base  # type: ignore[assignment]


_client: _Client | None = None


def connect_rank(path: str, token: str) -> None:
    """In a rank, before `init_process_group(BACKEND, ...)`: connect to the sidecar at `path`,
    present `token` (from the rank's job: no peer has it) and register the backend. The rank
    needs no network after this."""
    global _client
    _client = _Client(path, token)

    def create(options: Any, _backend_options: Any = None) -> SidecarGroup:
        if _client is None:
            raise RuntimeError("sidecar transport: not connected")
        timeout = getattr(options, "timeout", None)
        return SidecarGroup(_client, str(options.group_id), options.group_rank,
                            options.group_size, list(options.global_ranks_in_group),
                            timeout.total_seconds() if isinstance(timeout, timedelta) else None)

    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, create, extended_api=True, devices=["cpu"])
    _answer_as_gloo()


def disconnect() -> None:
    """In a rank whose function has returned: close the connection, so the sidecar writes its
    wire log while the rank saves its result, not after the parent has ended the rank. Final:
    the sidecar accepts one connection only, so nothing more can be carried."""
    global _client
    if _client is not None:
        try:
            _client.sock.close()
        finally:
            _client = None


def connected() -> bool:
    """Whether this process is a rank whose traffic its sidecar carries."""
    return _client is not None


def abort() -> None:
    """In a rank whose case raised while its peers may wait in an operation with it (see
    harness.cases): its sidecar shuts its connections to the other sidecars, so that a peer's
    pending operation with this rank fails (its rank gets the error) instead of waiting. Every
    group of the rank is unusable afterwards, until `reset`."""
    if _client is None:
        raise RuntimeError("sidecar transport: not connected")
    _client.call({"op": "abort"})


def reset(prefix: str) -> None:
    """In a rank, before it builds its process groups again after an abort (every rank calls it
    with the same `prefix`): its sidecar forgets every group and pending operation (those not
    completed are marked `aborted` in the wire log) and rendezvouses the groups built from now
    on under `prefix`, apart from those before it."""
    if _client is None:
        raise RuntimeError("sidecar transport: not connected")
    _client.call({"op": "reset", "prefix": str(prefix)})


def _answer_as_gloo() -> None:
    """`dist.get_backend()` says "gloo" for the sidecar backend: the transport carries gloo's
    own operations, and code under test may branch on the backend's name (cpu for gloo)."""
    real = dist.distributed_c10d.get_backend
    if getattr(real, "_sidecar_shim", False):
        return

    def get_backend(group: Any = None) -> Any:
        name = real(group)
        return dist.Backend("gloo") if name == BACKEND else name

    get_backend._sidecar_shim = True  # type: ignore[attr-defined]
    dist.get_backend = get_backend  # type: ignore[assignment]
    dist.distributed_c10d.get_backend = get_backend  # type: ignore[assignment]


def mark(label: str) -> None:
    """The rank's latest mark, sent along with its next operations (diagnostics only)."""
    if _client is not None:
        _client.label = str(label)


# -- sidecar side -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SidecarSpec:
    """What one sidecar needs: its rank, the world, where to rendezvous, listen and log."""

    rank: int
    world_size: int
    store_path: str  # gloo rendezvous, in the parent's private folder
    socket_path: str  # in the rank's work folder
    log_path: str  # in the parent's private folder
    token: str  # TOKEN_CHARS hex characters: the connection that presents them is the rank's
    timeout_s: float


class _Sidecar:
    def __init__(self, spec: SidecarSpec) -> None:
        self.spec = spec
        self.store = dist.FileStore(spec.store_path, spec.world_size)
        self.timeout = timedelta(seconds=spec.timeout_s)
        self.groups: dict[str, tuple[Any, tuple[int, ...]]] = {}
        self.works: dict[int, tuple[Any, list[torch.Tensor]]] = {}  # posted, not waited for
        self.recv_ids: dict[int, bool] = {}
        self.any_ids: set[int] = set()  # receives from any source, posted and not waited for
        self.records: list[WireRecord] = []
        self.work_records: dict[int, int] = {}  # a posted operation's index in `records`
        self.world: Any = None  # the world group's gloo context, made before the rank asks
        self.prefix = ""  # where groups rendezvous: a new one after each `reset`

    def prepare_world(self) -> None:
        """Make the gloo context of the world group now, while the rank starts: every rank's
        first group (its default one) is the world, and the sidecars' rendezvous for it then
        overlaps the rank's start instead of following it. Each sidecar takes it for the first
        world-sized group its rank asks for; the ranks ask in the same order."""
        self.world = dist.ProcessGroupGloo(dist.PrefixStore("world/", self.store),
                                           self.spec.rank, self.spec.world_size, self.timeout)

    def _group(self, header: dict[str, Any]) -> tuple[Any, tuple[int, ...]]:
        gid = str(header["gid"])
        if gid not in self.groups:
            raise ValueError(f"unknown group {gid}")
        return self.groups[gid]

    def _log(self, header: dict[str, Any], kind: str, ranks: tuple[int, ...],
             tensors: list[torch.Tensor], peer: int | None = None,
             peer_bytes: tuple[int, ...] = (), out_bytes: int = 0) -> None:
        self.records.append(WireRecord(
            kind=kind, peer=peer, group_ranks=ranks,
            bytes=sum(t.numel() * t.element_size() for t in tensors),
            dtype=str(tensors[0].dtype).removeprefix("torch.") if tensors else "",
            label=str(header.get("label", ""))[:200], peer_bytes=peer_bytes,
            out_bytes=out_bytes))

    def _all_to_all(self, header: dict[str, Any], op: str, pg: Any, ranks: tuple[int, ...],
                    tensors: list[torch.Tensor], outputs: list[torch.Tensor]
                    ) -> list[torch.Tensor]:
        """Both all-to-alls, as gloo's all_to_all_single (rows along dim 0); the list form
        (tensors of one shape, as gloo requires) goes flattened, one split per tensor. Splits
        are checked here, not left to gloo: they come from the rank."""
        size = len(ranks)
        if op == "alltoall":
            if len(tensors) != size or len(outputs) != size:
                raise ValueError(f"all_to_all takes {size} input and output tensors (one per "
                                 f"group rank), not {len(tensors)} and {len(outputs)}")
            if len({(t.dtype, tuple(t.shape)) for t in tensors + outputs}) > 1:
                raise ValueError("all_to_all: every input and output tensor must have the "
                                 "same shape and dtype (as with gloo)")
            source = torch.cat([t.reshape(-1) for t in tensors])
            target = torch.empty(sum(t.numel() for t in outputs), dtype=source.dtype)
            in_rows, out_rows = [t.numel() for t in tensors], [t.numel() for t in outputs]
        else:
            if len(tensors) != 1 or len(outputs) != 1:
                raise ValueError("all_to_all_single takes one input and one output tensor")
            source, target = tensors[0], outputs[0]
            in_rows = _splits(header.get("in_splits"), source, size, "input")
            out_rows = _splits(header.get("out_splits"), target, size, "output")
        in_row = math.prod(source.shape[1:]) * source.element_size()
        out_row = math.prod(target.shape[1:]) * target.element_size()
        self._log(header, op, ranks, [source], peer_bytes=tuple(n * in_row for n in in_rows),
                  out_bytes=sum(out_rows) * out_row)
        pg.alltoall_base(target, source, out_rows, in_rows,
                         dist.AllToAllOptions()).wait()
        if op == "alltoall_base":
            return [target]
        return [part.view_as(t) for part, t in zip(target.split(out_rows), outputs)]

    def handle(self, header: dict[str, Any], payload: bytearray
               ) -> tuple[dict[str, Any], list[torch.Tensor]]:
        op = header["op"]
        if op == "group":
            ranks = tuple(header["ranks"]) or tuple(range(self.spec.world_size))
            rank, size = int(header["rank"]), int(header["size"])
            # The group's own collective timeout (`new_group(timeout=...)`), as gloo in the
            # rank would have it, within the sidecar's.
            asked = header.get("timeout_s")
            timeout = self.timeout if not isinstance(asked, (int, float)) or asked <= 0 \
                else min(self.timeout, timedelta(seconds=float(asked)))
            if self.world is not None and (rank, size, ranks) == (
                    self.spec.rank, self.spec.world_size, tuple(range(size))):
                pg, self.world = self.world, None  # the first world group: made in advance
                pg._set_default_timeout(timeout)
            else:
                store = dist.PrefixStore(f"{self.prefix}group{header['gid']}/", self.store)
                pg = dist.ProcessGroupGloo(store, rank, size, timeout)
            self.groups[str(header["gid"])] = (pg, ranks)
            return {}, []
        if op == "wait":
            work_id = int(header["id"])
            work, tensors = self.works.pop(work_id)
            index = self.work_records.pop(work_id, None)
            try:
                work.wait()
            except Exception:
                self._mark_aborted([] if index is None else [index])
                self.any_ids.discard(work_id)
                self.recv_ids.pop(work_id, None)
                raise
            reply = {"source": work._source_rank()} if work_id in self.any_ids else {}
            self.any_ids.discard(work_id)
            return reply, tensors if self.recv_ids.pop(work_id, False) else []
        if op == "abort":
            from harness.cases import shut_connections

            shut_connections()  # the rank's own socket is a Unix one: it stays
            return {}, []
        if op == "reset":
            self._reset(str(header.get("prefix", ""))[:200])
            return {}, []
        pending = sum(t.nbytes for _, held in self.works.values() for t in held)
        if len(self.works) >= MAX_PENDING or pending > MAX_PAYLOAD_BYTES:
            raise ValueError(f"{len(self.works)} operations ({pending} bytes) posted and not "
                             "waited for: wait for some first")
        pg, ranks = self._group(header)
        tensors = _tensors_from(header.get("tensors", []), payload)
        first = len(self.records)
        try:
            return self._carry(header, op, pg, ranks, tensors)
        except Exception:
            self._mark_aborted(range(first, len(self.records)))
            raise

    def _mark_aborted(self, indices: Iterable[int]) -> None:
        """The records at `indices` are of operations that did not complete (see WireRecord)."""
        for i in indices:
            self.records[i] = replace(self.records[i], aborted=True)

    def _reset(self, prefix: str) -> None:
        """Forget every group and pending operation (after an abort, see `reset`)."""
        for work_id, (work, _) in self.works.items():
            index = self.work_records.get(work_id)
            try:
                done = bool(work.is_completed())
            except Exception:  # noqa: BLE001 - a work of a shut context
                done = False
            if index is not None and not done:
                self._mark_aborted([index])
        self.works.clear()
        self.work_records.clear()
        self.recv_ids.clear()
        self.any_ids.clear()
        self.groups.clear()
        self.world = None
        self.prefix = f"{prefix}/"

    def _carry(self, header: dict[str, Any], op: str, pg: Any,  # noqa: C901
               ranks: tuple[int, ...], tensors: list[torch.Tensor]
               ) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Log and carry one operation on group `pg` (global `ranks`)."""
        if op in ("send", "recv"):
            local = int(header["peer"])
            if op == "recv" and local == ANY_SOURCE:  # logged as the rank's log has it
                self._log(header, op, ranks, tensors, peer=None)
                work = pg.recv_anysource(tensors, int(header["tag"]))
                self.any_ids.add(int(header["id"]))
            else:
                self._log(header, op, ranks, tensors, peer=ranks[local])
                if op == "send":
                    work = pg.send(tensors, local, int(header["tag"]))
                else:
                    work = pg.recv(tensors, local, int(header["tag"]))
            if op == "recv":
                self.recv_ids[int(header["id"])] = True
            self.works[int(header["id"])] = (work, tensors)
            self.work_records[int(header["id"])] = len(self.records) - 1
            return {}, []
        outputs = [torch.empty(shape, dtype=dtype)
                   for shape, dtype in _checked(header.get("outputs", []))]
        reduce_name = str(header.get("reduce", "SUM"))
        if reduce_name not in _REDUCE_OPS:
            raise ValueError(f"unknown reduce op {reduce_name[:50]!r}")
        reduce = getattr(dist.ReduceOp, reduce_name)
        if op == "allreduce":
            self._log(header, op, ranks, tensors)
            pg.allreduce(tensors, _opts(dist.AllreduceOptions(), reduceOp=reduce)).wait()
            return {}, tensors
        if op == "broadcast":
            root = int(header["peer"])
            self._log(header, op, ranks, tensors, peer=ranks[root])
            pg.broadcast(tensors, _opts(dist.BroadcastOptions(), rootRank=root)).wait()
            return {}, tensors
        if op == "allgather":
            self._log(header, op, ranks, tensors)
            pg.allgather([outputs], tensors).wait()
            return {}, outputs
        if op == "allgather_base":
            self._log(header, op, ranks, tensors)
            pg._allgather_base(outputs[0], tensors[0]).wait()
            return {}, outputs
        if op in ("reduce_scatter", "reduce_scatter_base"):
            self._log(header, op, ranks, tensors)
            opts = _opts(dist.ReduceScatterOptions(), reduceOp=reduce)
            if op == "reduce_scatter":
                pg.reduce_scatter(outputs, [tensors], opts).wait()
            else:
                pg._reduce_scatter_base(outputs[0], tensors[0], opts).wait()
            return {}, outputs
        if op == "gather":
            root = int(header["peer"])
            self._log(header, op, ranks, tensors, peer=ranks[root])
            pg.gather([outputs] if outputs else [], tensors,
                      _opts(dist.GatherOptions(), rootRank=root)).wait()
            return {}, outputs
        if op == "scatter":
            root = int(header["peer"])
            self._log(header, op, ranks, tensors, peer=ranks[root],
                      peer_bytes=tuple(t.numel() * t.element_size() for t in tensors))
            pg.scatter(outputs, [tensors] if tensors else [],
                       _opts(dist.ScatterOptions(), rootRank=root)).wait()
            return {}, outputs
        if op == "reduce":
            root = int(header["peer"])
            self._log(header, op, ranks, tensors, peer=ranks[root])
            pg.reduce(tensors, _opts(dist.ReduceOptions(), rootRank=root,
                                     reduceOp=reduce)).wait()
            return {}, tensors
        if op in ("alltoall", "alltoall_base"):
            return {}, self._all_to_all(header, op, pg, ranks, tensors, outputs)
        if op == "barrier":
            self._log(header, op, ranks, [])
            pg.barrier().wait()
            return {}, []
        raise ValueError(f"unsupported operation {op!r}")

    def finish_sends(self, wait_s: float = 10.0) -> None:
        """Sends the rank posted and never waited for: carry them to their receivers before
        the sidecar exits (its rank may have disconnected as soon as its function returned).
        Bounded: a send nobody receives is given up after `wait_s`."""
        for work, _ in list(self.works.values()):
            try:
                work.wait(timedelta(seconds=wait_s))
            except Exception:  # noqa: BLE001 - a receive never matched, a peer gone
                pass
        self.works.clear()

    def write_log(self) -> None:
        tmp = self.spec.log_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump([asdict(r) for r in self.records], f)
        os.replace(tmp, self.spec.log_path)


def _splits(given: Any, tensor: torch.Tensor, size: int, side: str) -> list[int]:
    """Rows of `tensor` (dim 0) per group rank: `given`, or equal parts where it is empty."""
    rows = tensor.shape[0] if tensor.dim() else 1
    if not given:
        if rows % size:
            raise ValueError(f"all_to_all_single: {rows} {side} rows do not split equally "
                             f"over {size} ranks; pass split sizes")
        return [rows // size] * size
    if not isinstance(given, list) or len(given) != size or \
            not all(isinstance(n, int) and n >= 0 for n in given) or sum(given) != rows:
        raise ValueError(f"all_to_all_single: {side} splits {str(given)[:200]} are not {size} "
                         f"sizes that add up to its {rows} rows")
    return given


def _opts(options: Any, **values: Any) -> Any:
    for key, value in values.items():
        setattr(options, key, value)
    return options


def _presents(candidate: socket.socket, token: str) -> bool:
    """Whether a new connection's first bytes are `token` (read within HANDSHAKE_S)."""
    candidate.settimeout(HANDSHAKE_S)
    try:
        got = _recv_exact(candidate, TOKEN_CHARS)
    except (OSError, EOFError):
        return False
    finally:
        candidate.settimeout(None)
    return hmac.compare_digest(bytes(got), token.encode("ascii"))


def serve(spec: SidecarSpec) -> None:
    """The body of one sidecar: accept the rank (by its token), carry its operations, log
    them."""
    sidecar = _Sidecar(spec)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(spec.socket_path + ".tmp")
    os.chmod(spec.socket_path + ".tmp", 0o777)  # ranks may run as another user
    listener.listen(4)
    os.replace(spec.socket_path + ".tmp", spec.socket_path)
    sidecar.prepare_world()  # the rank may connect meanwhile: it waits in the backlog
    deadline = time.monotonic() + spec.timeout_s
    conn = None
    while conn is None:
        ready, _, _ = select.select([listener], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return
        candidate, _ = listener.accept()
        if _presents(candidate, spec.token):
            conn = candidate
        else:
            candidate.close()  # another process of the sandbox: not this rank
    listener.close()
    os.unlink(spec.socket_path)
    try:
        while True:
            try:
                header, payload = _recv_frame(conn)
            except (EOFError, ConnectionError):
                break
            try:
                reply, tensors = sidecar.handle(header, payload)
            except Exception as exc:  # noqa: BLE001 - the rank gets the error as text
                reply, tensors = {"error": f"{type(exc).__name__}: {exc}"[:2000]}, []
            _send_frame(conn, reply, tensors)
    finally:
        sidecar.write_log()
        sidecar.finish_sends()


def _server_main() -> None:
    """Read one JSON SidecarSpec per line, fork a sidecar for each, answer its pid. Dies with
    its parent, whose pid is the first argument (`SidecarServer`)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    # The signal only comes for a death after the call above: a parent that died while this
    # process started (importing torch takes seconds) has left it to an adopter already.
    if len(sys.argv) > 1 and os.getppid() != int(sys.argv[1]):
        return
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    torch.set_num_threads(1)
    for line in sys.stdin:
        spec = SidecarSpec(**json.loads(line))
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setpgid(0, 0)
                quiet = os.open(os.devnull, os.O_RDWR)  # the server's stdout answers the parent
                for fd in (0, 1, 2):
                    os.dup2(quiet, fd)
                serve(spec)
            except BaseException:  # noqa: BLE001
                status = 1
            os._exit(status)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


# -- parent side ------------------------------------------------------------------------------
class SidecarServer:
    """The process that forks sidecars: started once, outside the sandbox, torch preloaded."""

    def __init__(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # Sidecars run no code under test, but need no secret either: a minimal environment.
        env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ", "GLOO_SOCKET_IFNAME")
               if k in os.environ}
        env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": root})
        if os.path.isdir("/sys/class/net/lo"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from harness.sidecar import _server_main; _server_main()",
             str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, cwd=root)

    def fork(self, specs: Sequence[SidecarSpec]) -> list[int]:
        """Fork one sidecar per spec; their pids. All requests are written before the first
        answer is read, so the server forks them back to back."""
        if self.proc.stdin is None or self.proc.stdout is None or self.proc.poll() is not None:
            raise RuntimeError("the sidecar server is not running")
        self.proc.stdin.write("".join(json.dumps(asdict(spec)) + "\n" for spec in specs))
        self.proc.stdin.flush()
        return [int(self.proc.stdout.readline()) for _ in specs]


_server: SidecarServer | None = None


def server() -> SidecarServer:
    """The running server, started if need be. Call it first from a thread that lives as long
    as the process (the main thread): the server has PR_SET_PDEATHSIG, which fires when the
    *thread* that started it ends."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = SidecarServer()
    return _server


@dataclass
class SidecarSet:
    """The sidecars of one launch: their pids and private folder."""

    folder: str
    pids: list[int]
    world_size: int

    @classmethod
    def start(cls, rank_folders: Sequence[str], tokens: Sequence[str],
              timeout_s: float) -> SidecarSet:
        """One sidecar per rank; rank r's socket goes in its own private folder,
        `rank_folders[r]`, where no peer can reach it, and only the connection that presents
        `tokens[r]` (handed to rank r inside its job) is served. Needs no rank to exist yet:
        the launcher starts the sidecars while the ranks start."""
        folder = tempdirs.make("mlsys-sidecar-")  # 0700: the ranks cannot enter
        world_size = len(tokens)
        pids = server().fork([SidecarSpec(
            rank=r, world_size=world_size, store_path=os.path.join(folder, "store"),
            socket_path=socket_path(rank_folders[r], r), log_path=os.path.join(folder, f"{r}.json"),
            token=token, timeout_s=timeout_s) for r, token in enumerate(tokens)])
        return cls(folder=folder, pids=pids, world_size=world_size)

    def records(self, wait_s: float = 60.0) -> list[list[WireRecord]]:
        """Each rank's wire log; waits (up to `wait_s`: a loaded machine is slow) for sidecars
        to write it after their rank ended."""
        deadline = time.monotonic() + wait_s
        out: list[list[WireRecord]] = []
        for r in range(self.world_size):
            path = os.path.join(self.folder, f"{r}.json")
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.002)
            if not os.path.exists(path):
                raise WireMismatchError(f"rank {r}: its sidecar wrote no log")
            text = rankfiles.read_text(path, WIRE_LOG_BYTES)
            out.append([WireRecord(**{**d, "group_ranks": tuple(d["group_ranks"]),
                                       "peer_bytes": tuple(d.get("peer_bytes", ()))})
                        for d in json.loads(text)])
        return out

    def stop(self) -> None:
        for pid in self.pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
        tempdirs.release(self.folder)


def new_token() -> str:
    """A fresh secret for one rank's connection to its sidecar."""
    return secrets.token_hex(TOKEN_CHARS // 2)


def socket_path(rank_folder: str, rank: int) -> str:
    """Where rank `rank`'s sidecar listens: in the rank's own folder."""
    return os.path.join(rank_folder, f"rank{rank}.sidecar")


# -- judging the rank's log against the wire ---------------------------------------------------
# Public torch.distributed names (as the rank's log records them) -> the backend operation.
_KIND_OF = {
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv",
    "all_reduce": "allreduce", "broadcast": "broadcast", "all_gather": "allgather",
    "all_gather_into_tensor": "allgather_base", "_all_gather_base": "allgather_base",
    "all_gather_single": "allgather_base", "reduce_scatter_single": "reduce_scatter_base",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter_base",
    "_reduce_scatter_base": "reduce_scatter_base", "barrier": "barrier", "gather": "gather",
    "all_to_all": "alltoall", "all_to_all_single": "alltoall_base", "scatter": "scatter",
    "reduce": "reduce",
}
# Backend operation -> the public names that reach it (what Forbid rules name).
API_NAMES = {
    "send": ("send", "isend"), "recv": ("recv", "irecv"), "allreduce": ("all_reduce",),
    "broadcast": ("broadcast",), "allgather": ("all_gather",),
    "allgather_base": ("all_gather_into_tensor", "all_gather_single", "_all_gather_base"),
    "reduce_scatter": ("reduce_scatter",),
    "reduce_scatter_base": ("reduce_scatter_tensor", "reduce_scatter_single",
                            "_reduce_scatter_base"),
    "barrier": ("barrier",), "gather": ("gather",),
    "alltoall": ("all_to_all",), "alltoall_base": ("all_to_all_single",),
    "scatter": ("scatter",), "reduce": ("reduce",),
}


# Backend operation -> the public name it is listed under in a log made from the wire.
_LOG_NAME = {"allreduce": "all_reduce", "allgather": "all_gather",
             "allgather_base": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter",
             "reduce_scatter_base": "reduce_scatter_tensor", "alltoall": "all_to_all",
             "alltoall_base": "all_to_all_single"}
_ELEMENT_SIZE = {name: torch.empty(0, dtype=dtype).element_size()
                 for name, dtype in DTYPES.items()}


def carried(records: Sequence[WireRecord]) -> list[WireRecord]:
    """The operations of `records` that completed: traffic that happened (see WireRecord)."""
    return [record for record in records if not record.aborted]


def forbidden_on_wire(records: Sequence[WireRecord], forbids: Any) -> WireRecord | None:
    """The first wire operation that no public name it could come from may call."""
    for record in records:
        if all(forbids(name) for name in API_NAMES.get(record.kind, (record.kind,))):
            return record
    return None


def check_against_wire(rank: int, logged: Sequence[Any], wire: Sequence[WireRecord]) -> None:
    """Raise WireMismatchError unless the rank's logged point-to-point operations are, in
    order, the sends and receives its sidecar carried (kind, peer, bytes)."""
    def p2p(items: Iterable[tuple[str, int | None, int]]) -> list[tuple[str, int | None, int]]:
        return [i for i in items if i[0] in ("send", "recv")]

    claimed = p2p((_KIND_OF.get(r.op, r.op), r.peer, r.bytes) for r in logged)
    carried = p2p((w.kind, w.peer, w.bytes) for w in wire)
    if claimed != carried:
        first = next((i for i, (a, b) in enumerate(zip(claimed, carried)) if a != b),
                     min(len(claimed), len(carried)))
        raise WireMismatchError(
            f"rank {rank}: its communication log does not match the traffic the harness "
            f"carried for it (operation {first}: logged "
            f"{claimed[first] if first < len(claimed) else 'nothing'}, carried "
            f"{carried[first] if first < len(carried) else 'nothing'}; "
            f"{len(claimed)} logged, {len(carried)} carried point-to-point operations)")


__all__ = ["BACKEND", "SidecarGroup", "SidecarSet", "WireMismatchError", "WireRecord", "abort",
           "carried", "check_against_wire", "connect_rank", "connected", "disconnect",
           "forbidden_on_wire", "mark", "new_token", "reset", "socket_path"]
