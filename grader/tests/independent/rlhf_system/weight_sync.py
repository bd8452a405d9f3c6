"""Weight sync over point-to-point messages (independent implementation, README §5–§6)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist

from assignments.rlhf_system.toy import decode_manifest, dtype_of, encode_manifest

Entry = tuple[str, tuple[int, ...], str]


def _nbytes(entry: Entry) -> int:
    _, shape, spelling = entry
    return math.prod(shape) * torch.empty((), dtype=dtype_of(spelling)).element_size()


def make_manifest(state: Mapping[str, torch.Tensor]) -> list[Entry]:
    """(name, shape, dtype) per state entry, in the state's order."""
    return [(name, tuple(t.shape), str(t.dtype)) for name, t in state.items()]


def plan_buckets(manifest: Sequence[Entry], bucket_bytes: int) -> list[list[int]]:
    """Greedy buckets of consecutive entries, each at most `bucket_bytes`."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets: list[list[int]] = []
    filled = 0
    for index, entry in enumerate(manifest):
        size = _nbytes(entry)
        if size > bucket_bytes:
            raise ValueError(f"{entry[0]} holds {size} bytes, more than a bucket's {bucket_bytes}")
        if buckets and filled + size <= bucket_bytes:
            buckets[-1].append(index)
            filled += size
        else:
            buckets.append([index])
            filled = size
    return buckets


def shard_for_tp(name: str, tensor: torch.Tensor, tp_rank: int, tp_size: int,
                 tp_plan: Mapping[str, str]) -> torch.Tensor:
    """The TP rank's slice (column: dim 0, row: dim 1), or the whole tensor; a copy."""
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} is not in [0, {tp_size})")
    how = tp_plan.get(name)
    if how is None:
        return tensor.clone(memory_format=torch.contiguous_format)
    dim = {"column": 0, "row": 1}[how]
    if tensor.shape[dim] % tp_size:
        raise ValueError(f"{name}: dim {dim} of size {tensor.shape[dim]} does not split "
                         f"into {tp_size}")
    width = tensor.shape[dim] // tp_size
    return tensor.narrow(dim, tp_rank * width, width).clone(memory_format=torch.contiguous_format)


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def send_weights(state: Mapping[str, torch.Tensor], dst_ranks: Sequence[int],
                 bucket_bytes: int, version: int) -> None:
    """Header, manifest, then one message per bucket, to each destination in turn."""
    manifest = make_manifest(state)
    buckets = plan_buckets(manifest, bucket_bytes)  # raises before anything is sent
    tensors = list(state.values())
    encoded = encode_manifest(manifest)
    header = torch.tensor([version, encoded.numel()], dtype=torch.int64)
    payloads = [torch.cat([_raw(tensors[i]) for i in bucket]) for bucket in buckets]
    for dst in dst_ranks:
        dist.send(header, dst)
        dist.send(encoded, dst)
        for payload in payloads:
            dist.send(payload, dst)


def recv_weights(state: Mapping[str, torch.Tensor], src: int, bucket_bytes: int,
                 tp_rank: int = 0, tp_size: int = 1,
                 tp_plan: Mapping[str, str] | None = None) -> int:
    """Receive one sync into `state` in place (TP ranks keep their slices); its version."""
    header = torch.empty(2, dtype=torch.int64)
    dist.recv(header, src)
    version, length = int(header[0]), int(header[1])
    encoded = torch.empty(length, dtype=torch.uint8)
    dist.recv(encoded, src)
    manifest = decode_manifest(encoded)
    received: dict[str, torch.Tensor] = {}
    for bucket in plan_buckets(manifest, bucket_bytes):
        payload = torch.empty(sum(_nbytes(manifest[i]) for i in bucket), dtype=torch.uint8)
        dist.recv(payload, src)
        offset = 0
        for i in bucket:
            name, shape, spelling = manifest[i]
            size = _nbytes(manifest[i])
            chunk = payload[offset:offset + size].clone()
            received[name] = chunk.view(dtype_of(spelling)).reshape(shape)
            offset += size
    # every message is in: now it is safe to refuse
    if set(received) != set(state):
        raise ValueError(f"manifest names {sorted(received)} differ from the state's "
                         f"{sorted(state)}")
    plan = tp_plan or {}
    kept = {name: (full if tp_size == 1 else shard_for_tp(name, full, tp_rank, tp_size, plan))
            for name, full in received.items()}
    for name, piece in kept.items():
        if tuple(piece.shape) != tuple(state[name].shape):
            raise ValueError(f"{name}: received shape {tuple(piece.shape)}, this rank holds "
                             f"{tuple(state[name].shape)}")
    with torch.no_grad():
        for name, piece in kept.items():
            state[name].copy_(piece)
    return version
