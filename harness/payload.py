"""Plain data across the rank boundary: checked in the rank, size-capped, loaded safely.

A rank's result travels as a `torch.save` file that the parent reads with
`torch.load(weights_only=True)` after checking its size. Plain data means tensors, int, float,
bool, str, None, and lists, tuples and dicts (str or int keys) of those. Nothing else is accepted,
so nothing a rank produced is ever unpickled as an arbitrary object.
"""

from __future__ import annotations

import io
import os
from typing import Any

import torch

from harness.errors import PayloadError

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_SCALARS = (bool, int, float, str, type(None))


def to_plain(value: Any, where: str = "result") -> Any:
    """Return a copy of `value` with tensors detached, on CPU and compact.

    Raises PayloadError naming the offending path (e.g. ``result[2]['x']``) for any other type.
    torch.Size becomes a tuple; tensor subclasses such as nn.Parameter become plain tensors.
    """
    if isinstance(value, _SCALARS):
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
    if isinstance(value, (list, tuple)):
        items = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise PayloadError(f"{where} has a key of type {type(key).__name__}; "
                                   "use str or int keys")
            out[key] = to_plain(v, f"{where}[{key!r}]")
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
    torch.save(to_plain(value), buffer)
    size = buffer.tell()
    if size > max_bytes:
        raise PayloadError(f"the result is {size / 2**20:.1f} MiB, over the "
                           f"{max_bytes / 2**20:.0f} MiB cap; return less data (e.g. summaries)")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
    os.replace(tmp, path)


def load(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Read a rank's result file (parent side): size-checked, weights_only, plain data only."""
    size = os.path.getsize(path)
    if size > max_bytes + 4096:
        raise PayloadError(f"a result file of {size} bytes is over the cap of {max_bytes}")
    try:
        value = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - a forged or truncated file must not crash the parent
        raise PayloadError(f"unreadable result file ({type(exc).__name__}: {exc})"[:500]) from None
    to_plain(value)  # re-check the structure in the parent too
    return value
