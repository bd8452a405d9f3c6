"""Reference solution: weight synchronisation in buckets, and resharding to tensor parallel.

The shape of the protocol follows what production RLHF systems do when trainer and rollout
engine live on different ranks (OpenRLHF's and verl's weight updates, NeMo-Aligner's refit):
announce what is coming (names, shapes, dtypes), then stream the bytes in buckets big enough to
use the link well and small enough to bound the staging memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist

from assignments.rlhf_system.toy import decode_manifest, dtype_of, encode_manifest

_HEADER_DTYPE = torch.int64


def _entry_bytes(shape: Sequence[int], dtype: str) -> int:
    numel = 1
    for d in shape:
        numel *= int(d)
    element = torch.empty((), dtype=dtype_of(dtype)).element_size()
    return numel * element


def make_manifest(state: Mapping[str, torch.Tensor]) -> list[tuple[str, tuple[int, ...], str]]:
    """The manifest of a state dict: one (name, shape, dtype) per entry, in the state's order."""
    # state_dict order, buffers included: the receiver learns everything it will get, in
    # the order it will get it, before the first byte of data.
    return [(name, tuple(t.shape), str(t.dtype)) for name, t in state.items()]


def plan_buckets(manifest: Sequence[tuple[str, tuple[int, ...], str]],
                 bucket_bytes: int) -> list[list[int]]:
    """Group the manifest's entries into buckets of at most `bucket_bytes` bytes, greedily."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    buckets: list[list[int]] = []
    used = 0
    for i, (name, shape, dtype) in enumerate(manifest):
        size = _entry_bytes(shape, dtype)
        if size > bucket_bytes:
            raise ValueError(f"{name} holds {size} bytes, more than a bucket of "
                             f"{bucket_bytes}: raise bucket_bytes")
        # Greedy, in manifest order: both sides derive the same plan from the manifest alone.
        if buckets and used + size <= bucket_bytes:
            buckets[-1].append(i)
            used += size
        else:
            buckets.append([i])
            used = size
    return buckets


def shard_for_tp(name: str, tensor: torch.Tensor, tp_rank: int, tp_size: int,
                 tp_plan: Mapping[str, str]) -> torch.Tensor:
    """The slice of the full tensor `name` that tensor-parallel rank `tp_rank` holds."""
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} is not in [0, {tp_size})")
    kind = tp_plan.get(name)
    if kind is None:
        return tensor.clone().contiguous()
    # Megatron's layout (Shoeybi et al., 2019): a column-parallel Linear splits its output
    # features (dim 0 of the weight, and its bias); a row-parallel one its input features
    # (dim 1), keeping its bias whole.
    dim = 0 if kind == "column" else 1
    if tensor.shape[dim] % tp_size != 0:
        raise ValueError(f"{name}: dim {dim} of size {tensor.shape[dim]} does not split into "
                         f"{tp_size} equal slices")
    return tensor.chunk(tp_size, dim=dim)[tp_rank].contiguous().clone()


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


# ---- the only torch.distributed calls of a sync: a header, a manifest, the buckets ----------


def _send(t: torch.Tensor, dst: int) -> None:
    dist.send(t, dst=dst)


def _recv(t: torch.Tensor, src: int) -> torch.Tensor:
    dist.recv(t, src=src)
    return t


def send_weights(state: Mapping[str, torch.Tensor], dst_ranks: Sequence[int],
                 bucket_bytes: int, version: int) -> None:
    """Send one sync of `state` to every rank of `dst_ranks` (global ranks), in that order."""
    manifest = make_manifest(state)
    buckets = plan_buckets(manifest, bucket_bytes)  # raises before any byte moves
    encoded = encode_manifest(manifest)
    tensors = list(state.values())
    # Each bucket is packed once and sent to every receiver: one staging buffer of at most
    # bucket_bytes at a time.
    payloads = [torch.cat([_flat_bytes(tensors[i]) for i in bucket]) for bucket in buckets]
    header = torch.tensor([version, encoded.numel()], dtype=_HEADER_DTYPE)
    for dst in dst_ranks:
        _send(header, dst)
        _send(encoded, dst)
        for payload in payloads:
            _send(payload, dst)


def recv_weights(state: Mapping[str, torch.Tensor], src: int, bucket_bytes: int,
                 tp_rank: int = 0, tp_size: int = 1,
                 tp_plan: Mapping[str, str] | None = None) -> int:
    """Receive one sync from global rank `src` into `state`, in place; return its version."""
    plan = tp_plan or {}
    header = _recv(torch.zeros(2, dtype=_HEADER_DTYPE), src)
    version, manifest_len = int(header[0]), int(header[1])
    manifest = decode_manifest(_recv(torch.zeros(manifest_len, dtype=torch.uint8), src))
    buckets = plan_buckets(manifest, bucket_bytes)
    problem = ""
    if [name for name, _, _ in manifest] != list(state.keys()):
        problem = (f"the sender's manifest names {[n for n, _, _ in manifest]} differ from this "
                   f"rank's {list(state.keys())}")
    # Receive every bucket even when the manifest does not match, so the sender never waits.
    for bucket in buckets:
        sizes = [_entry_bytes(manifest[i][1], manifest[i][2]) for i in bucket]
        payload = _recv(torch.empty(sum(sizes), dtype=torch.uint8), src)
        offset = 0
        for i, size in zip(bucket, sizes):
            name, shape, dtype = manifest[i]
            chunk = payload[offset:offset + size]
            offset += size
            if problem:
                continue
            full = chunk.clone().view(dtype_of(dtype)).reshape(shape)
            # Resharding: a TP rollout rank gets the full tensor and keeps its own slice.
            mine = shard_for_tp(name, full, tp_rank, tp_size, plan) if tp_size > 1 else full
            target = state[name]
            if tuple(target.shape) != tuple(mine.shape):
                problem = (f"{name}: this rank holds shape {tuple(target.shape)}, the sync "
                           f"brings {tuple(mine.shape)}")
                continue
            with torch.no_grad():
                target.copy_(mine)
    if problem:
        raise ValueError(problem)
    return version
