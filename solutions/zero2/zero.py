"""ZeRO-2: optimizer state and gradients sharded across data-parallel ranks (reference solution).

Every trainable parameter is laid out, in order, in one flat space of P elements, padded to
N * S with S = ceil(P / N) and cut into N contiguous shards; rank r owns [r*S, (r+1)*S). A rank
keeps a master copy of its shard (fp32, or fp64 for fp64 parameters), the gradient of its shard and
the inner optimizer's state for its shard: 2P bytes of bf16 weights plus (4 + 4 + 12)/N bytes per
parameter instead of DDP's full copies (Rajbhandari et al., "ZeRO", SC'20, section 5.2).

One training step moves the same bytes as DDP's all-reduce, split in its two halves:
  backward   full gradients --reduce-scatter--> gradient shard   (in buckets, from grad hooks)
  step       inner optimizer updates the master shard (elementwise: per-group hyperparameters
             apply to each element as if the parameter were whole)
             master shard --all-gather--> every parameter on every rank

Buckets cut the shard's local offsets [0, S) into K ranges; bucket k gathers the k-th range of
*every* rank's shard into an [N, width] buffer, which is exactly the input layout
`reduce_scatter_tensor` wants. A post-accumulate-grad hook copies each parameter's gradient
into its buckets and frees `.grad`; a bucket whose last parameter arrived is reduce-scattered
asynchronously while backward carries on (the overlap of section 5.2's "bucketization").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_BUCKET_NUMEL = 1 << 22  # at most this many elements per bucket row (16 MiB of fp32 per rank)
_MIN_BUCKETS = 4  # small models still get a few buckets, so reduction overlaps backward


# -- communication: every torch.distributed call of this module -----------------------------
class _Comm:
    """The data-parallel group. Without an initialised process group it is a world of one."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.is_local = not dist.is_initialized()
        self.world_size = 1 if self.is_local else dist.get_world_size(group)
        self.rank = 0 if self.is_local else dist.get_rank(group)

    def reduce_scatter_async(self, out: torch.Tensor, inp: torch.Tensor) -> Any:
        """out[S'] <- sum over ranks of inp[rank, :]; inp is [N, S'] contiguous. Returns a work."""
        if self.is_local:
            out.copy_(inp[0])
            return None
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return fn(out, inp.view(-1), op=dist.ReduceOp.SUM, group=self.group, async_op=True)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        """out[N*S] <- concatenation of every rank's inp[S]."""
        if self.is_local:
            out.copy_(inp)
            return
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        fn(out, inp, group=self.group)

    def all_reduce_sum_(self, scalar: torch.Tensor) -> None:
        """In place: the one-element tensor becomes the sum over ranks."""
        if not self.is_local:
            dist.all_reduce(scalar, op=dist.ReduceOp.SUM, group=self.group)

    def gather(self, inp: torch.Tensor, dst: int) -> list[torch.Tensor] | None:
        """Every rank's inp on group rank dst (a list in rank order), None elsewhere."""
        if self.is_local:
            return [inp.clone()]
        parts = None
        if self.rank == dst:
            parts = [torch.empty_like(inp) for _ in range(self.world_size)]
        group = dist.group.WORLD if self.group is None else self.group
        dist.gather(inp, parts, dst=dist.get_global_rank(group, dst), group=self.group)
        return parts


# -- layout of the flat parameter space -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Piece:
    """A contiguous run of one parameter's gradient that lands in one bucket row."""

    bucket: int
    row: int  # the rank that owns these elements
    col: int  # offset inside the bucket row
    src: int  # offset inside the flattened parameter
    numel: int


@dataclass(slots=True)
class _Slot:
    """Where one trainable parameter lives: flat offset, group, and its bucket pieces."""

    param: torch.Tensor
    group: int
    start: int
    numel: int
    pieces: tuple[_Piece, ...] = ()
    buckets: tuple[int, ...] = ()


def _as_groups(params: Iterable[Any]) -> list[dict[str, Any]]:
    """Param groups as dicts with a `params` list (torch.optim accepts the same two forms)."""
    if isinstance(params, torch.Tensor):
        raise TypeError("params must be an iterable of tensors or of dicts, not one tensor")
    items = list(params)
    if not items:
        raise ValueError("Zero2Optimizer got an empty parameter list")
    if not isinstance(items[0], dict):
        items = [{"params": items}]
    groups = []
    for group in items:
        group = dict(group)
        group["params"] = ([group["params"]] if isinstance(group["params"], torch.Tensor)
                           else list(group["params"]))
        groups.append(group)
    return groups


def _check_params(groups: list[dict[str, Any]]) -> None:
    """ValueError unless every trainable parameter shares one dtype and device, and appears once."""
    seen: set[int] = set()
    kinds: dict[tuple[torch.dtype, torch.device], str] = {}
    for g, group in enumerate(groups):
        for i, p in enumerate(group["params"]):
            if id(p) in seen:
                raise ValueError(f"param_groups[{g}].params[{i}] appears more than once")
            seen.add(id(p))
            if p.requires_grad:
                kinds.setdefault((p.dtype, p.device), f"param_groups[{g}].params[{i}]")
    if len(kinds) > 1:
        found = ", ".join(f"{where}: {dtype} on {device}"
                          for (dtype, device), where in kinds.items())
        raise ValueError("all trainable parameters must share one dtype and device, so that they "
                         f"fit in one flat buffer; found {found}. Cast the model first.")
    if not kinds:
        raise ValueError("Zero2Optimizer needs at least one parameter with requires_grad=True")


def _bucket_edges(shard_numel: int) -> list[int]:
    """Local offsets cutting [0, S) into K nearly equal buckets."""
    if shard_numel == 0:
        return [0]
    num_buckets = min(shard_numel, max(_MIN_BUCKETS, math.ceil(shard_numel / _BUCKET_NUMEL)))
    return [round(k * shard_numel / num_buckets) for k in range(num_buckets + 1)]


def _pieces(start: int, numel: int, shard_numel: int, edges: list[int]) -> list[_Piece]:
    """Cut the flat range [start, start+numel) by shard, then by bucket."""
    pieces: list[_Piece] = []
    if numel == 0:
        return pieces
    first, last = start // shard_numel, (start + numel - 1) // shard_numel
    for row in range(first, last + 1):
        base = row * shard_numel
        lo, hi = max(start, base) - base, min(start + numel, base + shard_numel) - base
        for k in range(len(edges) - 1):
            a, b = max(lo, edges[k]), min(hi, edges[k + 1])
            if a < b:
                pieces.append(_Piece(k, row, a - edges[k], base + a - start, b - a))
    return pieces


class Zero2Optimizer:
    """ZeRO-2 wrapper around `optimizer_class`; see the stub's docstrings for the contract."""

    def __init__(self, params: Iterable[Any],
                 optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
                 group: dist.ProcessGroup | None = None, **defaults: Any) -> None:
        self._comm = _Comm(group)
        self.world_size, self.rank = self._comm.world_size, self._comm.rank
        self._groups = _as_groups(params)
        _check_params(self._groups)
        self._slots: list[_Slot] = []
        group_ranges = []
        offset = 0
        for g, group in enumerate(self._groups):
            first = offset
            for p in group["params"]:
                if p.requires_grad:
                    self._slots.append(_Slot(p, g, offset, p.numel()))
                    offset += p.numel()
            group_ranges.append((first, offset))
        self.numel = offset
        self.shard_numel = math.ceil(offset / self.world_size)
        p0 = self._slots[0].param
        self._dtype, self._device = p0.dtype, p0.device
        self._master_dtype = torch.promote_types(p0.dtype, torch.float32)
        self._build_master(group_ranges, optimizer_class, defaults)
        self._build_buckets()

    # -- construction ---------------------------------------------------------------------------
    def _build_master(self, group_ranges: list[tuple[int, int]],
                      optimizer_class: type[torch.optim.Optimizer], defaults: dict) -> None:
        """Master shard (a copy of this rank's elements) and one inner param per user group."""
        start, size = self.shard_bounds[0], self.shard_numel
        self._master = torch.zeros(size, dtype=self._master_dtype, device=self._device)
        for slot in self._slots:
            lo, hi = max(slot.start, start), min(slot.start + slot.numel, start + size)
            if lo < hi:
                flat = slot.param.detach().reshape(-1)
                self._master[lo - start:hi - start].copy_(flat[lo - slot.start:hi - slot.start])
        # A parameter straddling two shards is updated in two pieces; both pieces sit in the
        # inner group built from its own group's hyperparameters, and AdamW/SGD are elementwise.
        self._segments = []
        inner_groups = []
        for (first, end), group in zip(group_ranges, self._groups):
            lo = min(max(first - start, 0), size)
            hi = max(min(end - start, size), lo)
            self._segments.append((lo, hi))
            hyper = {k: v for k, v in group.items() if k != "params"}
            inner_groups.append({**hyper, "params": [self._master[lo:hi]]})
        self._inner = optimizer_class(inner_groups, **defaults)
        self._grad_shard: torch.Tensor | None = None

    def _build_buckets(self) -> None:
        self._edges = _bucket_edges(self.shard_numel)
        num_buckets = len(self._edges) - 1
        self._expected = [0] * num_buckets  # parameters that write into each bucket
        for slot in self._slots:
            slot.pieces = tuple(_pieces(slot.start, slot.numel, self.shard_numel, self._edges))
            slot.buckets = tuple(sorted({piece.bucket for piece in slot.pieces}))
            for k in slot.buckets:
                self._expected[k] += 1
        self._missing = list(self._expected)
        self._buffers: dict[int, torch.Tensor] = {}
        self._in_flight: list[tuple[int, torch.Tensor, Any, torch.Tensor]] = []
        self._hooks = [slot.param.register_post_accumulate_grad_hook(self._hook_for(slot))
                       for slot in self._slots]

    def _hook_for(self, slot: _Slot) -> Callable[[torch.Tensor], None]:
        return lambda _param: self._ingest(slot)

    # -- gradients: full .grad -> bucket rows -> reduce-scatter -> gradient shard ---------------
    def _bucket_buffer(self, k: int) -> torch.Tensor:
        if k not in self._buffers:
            width = self._edges[k + 1] - self._edges[k]
            # Zeros: the padding past P must contribute nothing to the shard or its norm.
            self._buffers[k] = torch.zeros(self.world_size, width, dtype=self._dtype,
                                           device=self._device)
        return self._buffers[k]

    def _ingest(self, slot: _Slot) -> None:
        """Move slot.param.grad into its bucket rows, free it, launch buckets now complete."""
        grad = slot.param.grad
        if grad is None:
            return
        flat = grad.detach().reshape(-1)
        for piece in slot.pieces:
            row = self._bucket_buffer(piece.bucket)[piece.row]
            row[piece.col:piece.col + piece.numel].add_(flat[piece.src:piece.src + piece.numel])
        slot.param.grad = None  # ZeRO-2: a full gradient lives only until it is in a bucket
        for k in slot.buckets:
            self._missing[k] -= 1
            if self._missing[k] == 0:
                self._launch(k)

    def _launch(self, k: int) -> None:
        buffer = self._buffers.pop(k)
        out = torch.empty(buffer.shape[1], dtype=buffer.dtype, device=buffer.device)
        work = self._comm.reduce_scatter_async(out, buffer)
        self._in_flight.append((k, out, work, buffer))  # the buffer must outlive the work
        self._missing[k] = self._expected[k]

    def _reduce_gradients(self) -> torch.Tensor | None:
        """Finish every reduction; the averaged gradient shard [S], or None if there is none."""
        for slot in self._slots:  # gradients no hook consumed (set by hand, or no backward)
            self._ingest(slot)
        for k in sorted(self._buffers):  # buckets some parameter never wrote (unused params)
            self._launch(k)
        for k, out, work, _ in self._in_flight:
            if work is not None:
                work.wait()
            if self._grad_shard is None:
                self._grad_shard = torch.zeros(self.shard_numel, dtype=self._master_dtype,
                                               device=self._device)
            lo, hi = self._edges[k], self._edges[k + 1]
            self._grad_shard[lo:hi] += out.to(self._master_dtype) / self.world_size
        self._in_flight.clear()
        self._missing = list(self._expected)
        return self._grad_shard

    # -- public API ---------------------------------------------------------------------------
    @property
    def shard_bounds(self) -> tuple[int, int]:
        start = self.rank * self.shard_numel
        return start, start + self.shard_numel

    @property
    def inner(self) -> torch.optim.Optimizer:
        return self._inner

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        grad_shard = self._reduce_gradients()
        local = (torch.zeros((), dtype=self._master_dtype, device=self._device)
                 if grad_shard is None else grad_shard.pow(2).sum())
        # The padding is zero, so the shards' squares add up to the full gradient's.
        self._comm.all_reduce_sum_(local)
        total_norm = local.sqrt()
        if grad_shard is not None:
            grad_shard.mul_(torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
        return total_norm

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_shard = self._reduce_gradients()
        if grad_shard is None:
            return loss  # no gradient on any parameter: nothing to update, nothing to send
        for (lo, hi), group in zip(self._segments, self._inner.param_groups):
            group["params"][0].grad = grad_shard[lo:hi]
        self._inner.step()
        self._gather_params()
        return loss

    def _gather_params(self) -> None:
        """All-gather the updated master shards into every rank's parameters."""
        full = torch.empty(self.world_size * self.shard_numel, dtype=self._dtype,
                           device=self._device)
        self._comm.all_gather(full, self._master.to(self._dtype))
        with torch.no_grad():
            for slot in self._slots:
                slot.param.copy_(full[slot.start:slot.start + slot.numel].view_as(slot.param))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, _, work, _ in self._in_flight:  # launched on every rank: finish, then drop
            if work is not None:
                work.wait()
        self._in_flight.clear()
        self._buffers.clear()
        self._missing = list(self._expected)
        for slot in self._slots:
            if slot.param.grad is not None:
                if set_to_none:
                    slot.param.grad = None
                else:
                    slot.param.grad.zero_()
        if set_to_none:
            self._grad_shard = None
            for group in self._inner.param_groups:
                group["params"][0].grad = None
        elif self._grad_shard is not None:
            self._grad_shard.zero_()

    def state_dict(self) -> dict:
        return {"inner": self._inner.state_dict(), "master": self._master,
                "shard_bounds": self.shard_bounds, "world_size": self.world_size,
                "numel": self.numel}

    def load_state_dict(self, state: dict) -> None:
        mine = (self.shard_bounds, self.world_size, self.numel)
        theirs = (tuple(state["shard_bounds"]), state["world_size"], state["numel"])
        if mine != theirs:
            raise ValueError(f"state of shard {theirs[0]} of {theirs[1]} ranks over {theirs[2]} "
                             f"elements cannot load into shard {mine[0]} of {mine[1]} ranks over "
                             f"{mine[2]}: load each rank's own state into the same layout")
        self._inner.load_state_dict(state["inner"])
        self._master.copy_(state["master"])

    def consolidated_state_dict(self, dst: int = 0) -> dict | None:
        inner_params = [group["params"][0] for group in self._inner.param_groups]
        local_states = [self._inner.state.get(p, {}) for p in inner_params]
        elementwise = sorted({key for p, st in zip(inner_params, local_states)
                              for key, value in st.items()
                              if torch.is_tensor(value) and value.shape == p.shape})
        full = {}
        for key in elementwise:  # one gather per state tensor kind, in the same order everywhere
            shard = torch.zeros(self.shard_numel, dtype=self._master_dtype, device=self._device)
            for (lo, hi), st in zip(self._segments, local_states):
                shard[lo:hi] = st[key]
            parts = self._comm.gather(shard, dst)
            if parts is not None:
                full[key] = torch.cat(parts)
        if self.rank != dst:
            return None
        return self._assemble(local_states, full)

    def _assemble(self, local_states: list[dict], full: dict[str, torch.Tensor]) -> dict:
        """The state_dict a single-process optimizer over the same param groups would return."""
        slot_of = {id(slot.param): slot for slot in self._slots}
        state: dict[int, dict] = {}
        param_groups = []
        index = 0
        for g, group in enumerate(self._groups):
            ids = []
            for p in group["params"]:
                slot = slot_of.get(id(p))
                if slot is not None and local_states[g]:
                    entry = {}
                    for key, value in local_states[g].items():
                        if key in full:  # per-element: cut the parameter out of the flat space
                            flat = full[key][slot.start:slot.start + slot.numel]
                            entry[key] = flat.view_as(p).to(p.dtype).clone()
                        else:  # per-parameter scalars (step) are the same in every piece
                            entry[key] = value.clone() if torch.is_tensor(value) else value
                    state[index] = entry
                ids.append(index)
                index += 1
            hyper = {k: v for k, v in self._inner.param_groups[g].items() if k != "params"}
            param_groups.append({**hyper, "params": ids})
        return {"state": state, "param_groups": param_groups}
