"""Weight synchronisation from a training rank to rollout ranks (README §5–§6).

A sync moves a model's whole state (parameters *and* buffers, as `state_dict()` lists them) from
one sender to each receiver, over point-to-point `dist.send`/`dist.recv` with *global* ranks.
The wire protocol, per receiver, is exactly these messages in this order (README §5):

1. header: int64 tensor [2] = (version, number of bytes of the encoded manifest);
2. manifest: `toy.encode_manifest(make_manifest(state))`, a uint8 tensor of that length;
3. buckets: for each bucket of `plan_buckets(manifest, bucket_bytes)` in order, one 1-D uint8
   tensor holding, in manifest order, the raw bytes of the bucket's tensors
   (`t.contiguous().view(-1).view(torch.uint8)` each, concatenated); its length is the sum of
   their byte sizes.

Tensor-parallel receivers (README §6) receive the full tensors and keep their slices.
`toy.dtype_of("torch.float32")` turns a manifest's dtype string back into a torch dtype
(`getattr(torch, name)` is not allowed: attribute names must be literals).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def make_manifest(state: Mapping[str, torch.Tensor]) -> list[tuple[str, tuple[int, ...], str]]:
    """The manifest of a state dict: one (name, shape, dtype) per entry, in the state's order.

    Args:
        state: name -> tensor, e.g. `model.state_dict()` (parameters and buffers).

    Returns:
        [(name, tuple(tensor.shape), str(tensor.dtype)), ...], e.g.
        ("fc1.weight", (128, 32), "torch.float32"), in the iteration order of `state`.
    """
    raise NotImplementedError("make_manifest: see README §5")


def plan_buckets(manifest: Sequence[tuple[str, tuple[int, ...], str]],
                 bucket_bytes: int) -> list[list[int]]:
    """Group the manifest's entries into buckets of at most `bucket_bytes` bytes, greedily.

    Walk the entries in manifest order; an entry joins the current bucket if the bucket's bytes
    plus its own stay <= bucket_bytes, else it starts a new bucket. An entry's bytes are
    numel * element size of its dtype (a shape () entry has numel 1). Entries of 0 bytes join
    the current bucket (or the first one).

    Returns:
        Lists of manifest indices; concatenated they are 0, 1, ..., len(manifest) - 1. An empty
        manifest gives [].

    Raises:
        ValueError: bucket_bytes < 1, or an entry larger than bucket_bytes (it fits no bucket).
    """
    raise NotImplementedError("plan_buckets: see README §5")


def shard_for_tp(name: str, tensor: torch.Tensor, tp_rank: int, tp_size: int,
                 tp_plan: Mapping[str, str]) -> torch.Tensor:
    """The slice of the full tensor `name` that tensor-parallel rank `tp_rank` of `tp_size` holds.

    tp_plan[name] == "column": the tp_rank-th of tp_size equal chunks along dim 0;
    "row": along dim 1 (a weight [out, in] cut by input features); a name not in the plan is
    replicated (the whole tensor).

    Returns:
        A new contiguous tensor (never a view sharing `tensor`'s storage).

    Raises:
        ValueError: the dimension to cut is not divisible by tp_size, or tp_rank not in
        [0, tp_size).
    """
    raise NotImplementedError("shard_for_tp: see README §6")


def send_weights(state: Mapping[str, torch.Tensor], dst_ranks: Sequence[int],
                 bucket_bytes: int, version: int) -> None:
    """Send one sync of `state` to every rank of `dst_ranks` (global ranks), in that order.

    For each destination, all its messages (header, manifest, buckets; module docstring) before
    the next destination's. Blocking `dist.send` (or isend + wait); the state is not modified.

    Raises:
        ValueError (before sending anything): an entry larger than bucket_bytes.
    """
    raise NotImplementedError("send_weights: see README §5")


def recv_weights(state: Mapping[str, torch.Tensor], src: int, bucket_bytes: int,
                 tp_rank: int = 0, tp_size: int = 1,
                 tp_plan: Mapping[str, str] | None = None) -> int:
    """Receive one sync from global rank `src` into `state`, in place; return its version.

    `state` maps every name of the sender's manifest to this rank's tensor of it: the full
    tensor when tp_size == 1, else `shard_for_tp(name, full, tp_rank, tp_size, tp_plan)`'s
    shape. After the call each of them holds the sender's values bit for bit (sliced for TP),
    written in place (`copy_`): a `model.state_dict()` passed here updates the model itself.
    Receives exactly the messages `send_weights` sends, sizing the buckets from the received
    manifest and `bucket_bytes` (which must be the sender's).

    Returns:
        The version from the header.

    Raises:
        ValueError (after every message of the sync has been received, so the sender never
        blocks): the manifest's names differ from `state`'s, or a shape does not match.
    """
    raise NotImplementedError("recv_weights: see README §5")

