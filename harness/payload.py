"""Plain data across the rank boundary: checked in the rank, validated before it is loaded.

A rank's result travels as a `torch.save` file. Plain data means tensors, int, float, bool, str,
None, and lists, tuples and dicts (str or int keys) of those. Nothing else is accepted, so
nothing a rank produced is ever unpickled as an arbitrary object.

- Rank side: `to_plain` copies the value into plain data (or names the path of what is not),
  `dump` writes it atomically under the size cap.
- Parent side: `load` reads the file once and never trusts its size to say what it holds (a
  1 KB pickle of lists that share references expands to 2^40 paths, a 1.6 KB file of stride-0
  views to gigabytes). Before anything is unpickled, `inspect` (`harness/payload_scan.py`)
  proves from the bytes that loading is bounded and the value plain; only then is it read with
  `torch.load(weights_only=True)` — whose work is now bounded by the pickle's length and the
  storages' bytes — and the loaded value is checked again, iteratively and with the same caps
  (`check_plain`).

The caps and the rule for tensor views are in `harness/payload_rules.py` (`Caps`,
`check_view`). Honest results (`dump` of `to_plain`) are trees of compact tensors, so the rules
never refuse one.
"""

from __future__ import annotations

import io
import os
from typing import Any

import torch

from harness import rankfiles
from harness.errors import PayloadError
from harness.payload_rules import CAPS, DEFAULT_MAX_BYTES, SCALARS, Caps, caps_for, check_view
from harness.payload_scan import Summary, inspect

__all__ = ["CAPS", "DEFAULT_MAX_BYTES", "Caps", "Summary", "check_plain", "check_view", "dump",
           "inspect", "load", "to_plain"]


# ---------------------------------------------------------------------------- rank side


def to_plain(value: Any, where: str = "result", *, caps: Caps = CAPS) -> Any:
    """Return a copy of `value` with tensors detached, on CPU and compact.

    Raises PayloadError naming the offending path (e.g. ``result[2]['x']``) for any other type,
    and for a value nested deeper than `caps.max_depth` or with more than `caps.max_nodes`
    nodes counted per path (a list that contains itself, or lists sharing references).
    torch.Size becomes a tuple; tensor subclasses such as nn.Parameter become plain tensors.
    """
    budget = [caps.max_nodes]
    return _to_plain(value, where, 0, budget, caps)


def _to_plain(value: Any, where: str, depth: int, budget: list[int], caps: Caps) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise PayloadError(f"the result expands to more than {caps.max_nodes} nodes (shared "
                           f"references are counted once per path); return less data")
    if isinstance(value, SCALARS):
        return value
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise PayloadError(f"{where} is a {value.layout} tensor; return a dense tensor")
        plain = value.detach()
        if type(plain) is not torch.Tensor:
            plain = plain.as_subclass(torch.Tensor)
        return plain.to("cpu").clone()
    if isinstance(value, torch.Size):
        return tuple(int(v) for v in value)
    if isinstance(value, (list, tuple, dict)) and depth >= caps.max_depth:
        raise PayloadError(f"{where} is nested more than {caps.max_depth} levels deep (does "
                           f"a list contain itself?)")
    if isinstance(value, (list, tuple)):
        items = [_to_plain(v, f"{where}[{i}]", depth + 1, budget, caps)
                 for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise PayloadError(f"{where} has a key of type {type(key).__name__}; "
                                   "use str or int keys")
            out[key] = _to_plain(v, f"{where}[{key!r}]", depth + 1, budget, caps)
        return out
    hint = ""
    if type(value).__module__ == "numpy":
        hint = " (convert numpy values with torch.as_tensor or .item())"
    raise PayloadError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}; "
                       f"a rank may return only tensors, numbers, str, bool, None and "
                       f"lists/tuples/dicts of those{hint}")


def dump(value: Any, path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
    """Write plain `value` to `path` atomically (rank side). Raises PayloadError if too large."""
    buffer = io.BytesIO()
    torch.save(to_plain(value, caps=caps_for(max_bytes)), buffer)
    size = buffer.tell()
    if size > max_bytes:
        raise PayloadError(f"the result is {size / 2**20:.1f} MiB, over the "
                           f"{max_bytes / 2**20:.0f} MiB cap; return less data (e.g. summaries)")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- parent side


def load(path: str, max_bytes: int = DEFAULT_MAX_BYTES, *, who: str = "the rank") -> Any:
    """Read a rank's result file (parent side): validated, then loaded weights_only.

    The file is read once; `inspect` proves from its bytes that loading is bounded and the
    value plain before `torch.load` sees them, and `check_plain` checks the loaded value.
    Raises PayloadError with a message that starts with `who` and names the rule broken.
    """
    caps = caps_for(max_bytes)
    try:
        data = rankfiles.read_capped(path, caps.max_bytes + 4096)
    except rankfiles.RankFileError as exc:
        raise PayloadError(f"{who}: result file refused: {exc.why}") from None
    except OSError as exc:
        raise PayloadError(f"{who}: unreadable result file ({exc.strerror})") from None
    inspect(data, caps, who=who)
    try:
        value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - a forged or truncated file must not crash the parent
        raise PayloadError(f"{who}: unreadable result file ({type(exc).__name__}: "
                           f"{exc})"[:500]) from None
    check_plain(value, caps, who=who)
    return value


def check_plain(value: Any, caps: Caps = CAPS, *, who: str = "the rank") -> None:
    """Check a loaded value iteratively: plain types, caps, tensors that are plain views.

    Walks naively (a shared container is visited once per path) but never past
    `caps.max_nodes`, so it ends quickly on any input."""
    nodes = 0
    tensor_bytes = 0
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        nodes += 1
        if nodes > caps.max_nodes:
            raise PayloadError(_too_many(who, caps))
        kind = type(item)
        if kind in SCALARS:
            continue
        if kind is torch.Tensor:
            if item.layout != torch.strided or item.device.type != "cpu":
                raise PayloadError(f"{who} returned a {item.layout} tensor on {item.device}; "
                                   f"only dense CPU tensors are plain data")
            elsize = item.element_size()
            why = check_view(tuple(item.shape), tuple(item.stride()), item.storage_offset(),
                             item.untyped_storage().nbytes() // elsize)
            if why:
                raise PayloadError(f"{who} returned a tensor that {why}")
            tensor_bytes += item.numel() * elsize
            if tensor_bytes > caps.max_bytes:
                raise PayloadError(_too_much_data(who, caps))
            continue
        if kind not in (list, tuple, dict):
            raise PayloadError(f"{who} returned a {kind.__module__}.{kind.__qualname__}, "
                               f"which is not plain data")
        if depth >= caps.max_depth:
            raise PayloadError(_too_deep(who, caps))
        if kind is dict:
            for key in item:
                if type(key) not in (str, int):
                    raise PayloadError(f"{who} returned a dict with a {type(key).__name__} key")
            todo.extend((v, depth + 1) for v in item.values())
        else:
            todo.extend((v, depth + 1) for v in item)


def _too_many(who: str, caps: Caps) -> str:
    return (f"{who} returned a result that expands to more than {caps.max_nodes} nodes "
            f"(shared references are counted once per path)")


def _too_deep(who: str, caps: Caps) -> str:
    return f"{who} returned a result nested more than {caps.max_depth} levels deep"


def _too_much_data(who: str, caps: Caps) -> str:
    return (f"{who} returned a result whose tensors hold more than {caps.max_bytes} bytes "
            f"(numel × element size, counted once per path)")
