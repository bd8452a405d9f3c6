"""Plain data across the rank boundary: checked in the rank, validated before it is loaded.

A rank's result travels as a `torch.save` file. Plain data means tensors, int, float, bool, str,
None, and lists, tuples and dicts (str or int keys) of those. Nothing else is accepted, so
nothing a rank produced is ever unpickled as an arbitrary object.

The parent never trusts the file's size to say what it holds: a 1 KB pickle of lists that
share references expands to 2^40 paths, and a 1.6 KB file of stride-0 views to gigabytes. So
`load` reads the bytes once and, before anything is unpickled, `inspect` walks the archive and
the opcodes of its pickle symbolically (`pickletools`, nothing materialised):

- the zip holds only what `torch.save` writes (`data.pkl`, `data/<key>` storages, version
  records), every entry stored uncompressed, no duplicates;
- the pickle uses only the opcodes and globals `torch.save` emits for plain data;
- each tensor is a plain strided view: no stride-0 (expanded/broadcast), negative or
  overlapping strides, and its extent fits the storage it names, whose record has exactly the
  declared size;
- the result, counted as any naive consumer would walk it (a container reached twice counts
  twice; memoised, so the count itself is linear), has at most `CAPS.max_nodes` nodes and
  `CAPS.max_depth` levels, no cycle, and at most `max_bytes` of tensor data (numel × element
  size over every tensor, counted per path).

Only then is it read with `torch.load(weights_only=True)` — whose work is now bounded by the
pickle's length and the storages' bytes — and the loaded value is checked again, iteratively
and with the same caps (`check_plain`). Honest results (`dump` of `to_plain`) are trees of
compact tensors, so the rules never refuse one.
"""

from __future__ import annotations

import io
import os
import pickletools
import struct
import zipfile
from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import PayloadError


@dataclass(frozen=True)
class Caps:
    """Every limit on a rank's result, in one place."""

    max_bytes: int = 64 * 1024 * 1024  # the file; also tensor data, counted per path
    max_nodes: int = 500_000  # values as a naive walk meets them (shared ones per path)
    max_depth: int = 64  # nesting of lists/tuples/dicts
    max_ops: int = 2_000_000  # pickle opcodes: bounds the unpickler's time
    max_entries: int = 100_000  # records in the zip archive (one per tensor storage)
    max_ndim: int = 64  # dimensions of one tensor


CAPS = Caps()
DEFAULT_MAX_BYTES = CAPS.max_bytes
_SCALARS = (bool, int, float, str, type(None))


def _caps(max_bytes: int) -> Caps:
    return CAPS if max_bytes == CAPS.max_bytes else Caps(**{**CAPS.__dict__,
                                                           "max_bytes": max_bytes})


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
    torch.save(to_plain(value, caps=_caps(max_bytes)), buffer)
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
    caps = _caps(max_bytes)
    try:
        size = os.path.getsize(path)
        if size > caps.max_bytes + 4096:
            raise PayloadError(f"{who} wrote a result file of {size} bytes, over the cap of "
                               f"{caps.max_bytes}")
        with open(path, "rb") as f:
            data = f.read(caps.max_bytes + 4097)
    except OSError as exc:
        raise PayloadError(f"{who}: unreadable result file ({exc.strerror})") from None
    if len(data) > caps.max_bytes + 4096:
        raise PayloadError(f"{who} wrote a result file over the cap of {caps.max_bytes} bytes")
    inspect(data, caps, who=who)
    try:
        value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - a forged or truncated file must not crash the parent
        raise PayloadError(f"{who}: unreadable result file ({type(exc).__name__}: "
                           f"{exc})"[:500]) from None
    check_plain(value, caps, who=who)
    return value


@dataclass(frozen=True)
class Summary:
    """What `inspect` found: the value as a naive walk would meet it."""

    nodes: int
    depth: int
    tensor_bytes: int
    storage_bytes: int
    ops: int


def check_view(size: tuple[int, ...], stride: tuple[int, ...], offset: int,
               storage_numel: int) -> str:
    """'' if a tensor of `size`/`stride` at `offset` is a plain view into a storage of
    `storage_numel` elements; otherwise why not (stride-0, negative, overlapping, outside)."""
    if len(size) != len(stride):
        return "has mismatched sizes and strides"
    if any(s < 0 for s in size) or offset < 0:
        return "has a negative size or offset"
    if any(s == 0 for s in size):
        return ""
    dims = sorted((st, sz) for sz, st in zip(size, stride) if sz > 1)
    reach = 0  # the last element the smaller-strided dimensions reach, relative to the start
    for st, sz in dims:
        if st == 0:
            return "is an expanded (stride-0) view"
        if st < 0:
            return "has a negative stride"
        if st <= reach:
            return "is an overlapping view (its elements share memory)"
        reach += (sz - 1) * st
    if offset + reach + 1 > storage_numel:
        return (f"reaches element {offset + reach} of a storage of {storage_numel} "
                f"(out of its storage)")
    return ""


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
        if kind in _SCALARS:
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


# ------------------------------------------------------------- inspecting without loading

_ARCHIVE_RECORDS = {"data.pkl", "version", ".format_version", ".storage_alignment", "byteorder",
                    ".data/version", ".data/serialization_id"}
_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in
           (getattr(torch, name) for name in dir(torch))
           if isinstance(dtype, torch.dtype) and not str(dtype).startswith("torch.q")}
_STORAGE_TYPES = {name: dtype for dtype, name in torch.storage._dtype_to_storage_type_map().items()
                  if dtype in _DTYPES.values()}


class _Obj:
    """A value in the symbolic unpickling: a container, a tensor, or a non-data helper."""

    __slots__ = ("kind", "items", "info")

    def __init__(self, kind: str, items: list[Any] | None = None, info: Any = None) -> None:
        self.kind = kind  # list, tuple, dict, tensor | global, storage, hooks
        self.items: list[Any] = items if items is not None else []
        self.info = info  # global: its name; storage: (dtype, key, numel); tensor: nbytes


_CONTAINERS = frozenset({"list", "tuple", "dict"})


def inspect(data: bytes, caps: Caps = CAPS, *, who: str = "the rank") -> Summary:
    """Validate a `torch.save` file's bytes without unpickling anything; see the module doc.

    Returns what the value holds; raises PayloadError naming the rule a file breaks."""

    def bad(why: str) -> PayloadError:
        return PayloadError(f"{who} returned a result that {why}")

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise PayloadError(f"{who}: unreadable result file (not a torch.save archive: "
                           f"{exc})"[:500]) from None
    if len(infos) > caps.max_entries:
        raise bad(f"is an archive of {len(infos)} records, over the cap of {caps.max_entries}")
    records: dict[str, zipfile.ZipInfo] = {}
    prefix = ""
    for info in infos:
        head, _, rest = info.filename.partition("/")
        prefix = prefix or head
        if head != prefix or not rest or info.filename in records:
            raise bad(f"is not a torch.save archive (record {info.filename[:80]!r})")
        if rest not in _ARCHIVE_RECORDS and not (rest.startswith("data/")
                                                 and rest[5:].isdigit()):
            raise bad(f"is not a plain torch.save archive (record {rest[:80]!r})")
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise bad(f"has a compressed record ({rest[:80]!r})")
        records[rest] = info
    if "data.pkl" not in records:
        raise PayloadError(f"{who}: unreadable result file (no data.pkl in the archive)")
    if sum(info.file_size for info in infos) > len(data):
        raise bad("is an archive whose records are larger than the file")
    try:
        pickled = archive.read(records["data.pkl"])
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise PayloadError(f"{who}: unreadable result file ({exc})"[:500]) from None
    return _scan_pickle(pickled, records, caps, bad)


def _scan_pickle(pickled: bytes, records: dict[str, zipfile.ZipInfo], caps: Caps,
                 bad: Any) -> Summary:
    stack: list[Any] = []
    marks: list[list[Any]] = []
    memo: dict[int, Any] = {}
    storages: dict[str, tuple[torch.dtype, int]] = {}
    ops = 0
    root: Any = None

    def pop_mark() -> list[Any]:
        nonlocal stack
        if not marks:
            raise bad("is a malformed pickle (no mark)")
        items, stack = stack, marks.pop()
        return items

    def pop() -> Any:
        if not stack:
            raise bad("is a malformed pickle (empty stack)")
        return stack.pop()

    arg: Any
    try:
        for name, arg in _opcodes(pickled):
            ops += 1
            if ops > caps.max_ops:
                raise bad(f"is a pickle of more than {caps.max_ops} operations")
            if name == "BINPUT" or name == "LONG_BINPUT":
                if not stack:
                    raise bad("is a malformed pickle (memo of nothing)")
                memo[arg] = stack[-1]
            elif name in _PUSH_ARG:
                stack.append(arg)
            elif name in _CONSTANTS:
                stack.append(_CONSTANTS[name])
            elif name == "EMPTY_LIST":
                stack.append(_Obj("list"))
            elif name == "EMPTY_DICT":
                stack.append(_Obj("dict"))
            elif name == "EMPTY_TUPLE":
                stack.append(_Obj("tuple"))
            elif name == "MARK":
                marks.append(stack)
                stack = []
            elif name == "TUPLE":
                items = pop_mark()  # rebinds `stack`: take the items first
                stack.append(_Obj("tuple", items))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n:
                    raise bad("is a malformed pickle (short stack)")
                items = stack[-n:]
                del stack[-n:]
                stack.append(_Obj("tuple", items))
            elif name in ("APPEND", "APPENDS"):
                items = [pop()] if name == "APPEND" else pop_mark()
                target = stack[-1] if stack else None
                if not isinstance(target, _Obj) or target.kind != "list":
                    raise bad("is a malformed pickle (append to a non-list)")
                target.items.extend(items)
            elif name in ("SETITEM", "SETITEMS"):
                if name == "SETITEM":
                    v, k = pop(), pop()
                    items = [k, v]
                else:
                    items = pop_mark()
                target = stack[-1] if stack else None
                if (not isinstance(target, _Obj) or target.kind != "dict"
                        or len(items) % 2):
                    raise bad("is a malformed pickle (setitem on a non-dict)")
                for k in items[0::2]:
                    if type(k) not in (str, int):
                        raise bad(f"has a dict key that is not a str or int ({_kind(k)})")
                target.items.extend(items[1::2])
            elif name in ("BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise bad("is a malformed pickle (unknown memo key)")
                stack.append(memo[arg])
            elif name == "GLOBAL":
                stack.append(_global(arg, bad))
            elif name == "BINPERSID":
                stack.append(_storage(pop(), records, storages, bad))
            elif name == "REDUCE":
                args, fn = pop(), pop()
                stack.append(_reduce(fn, args, caps, bad))
            elif name == "PROTO":
                pass
            elif name == "STOP":
                if len(stack) != 1 or marks:
                    raise bad("is a malformed pickle (stack at STOP)")
                root = stack[0]
                break
            else:
                raise bad(f"uses the pickle operation {name}, which plain data never needs")
    except PayloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - decoding a forged file: any error is its fault
        raise bad(f"is a malformed pickle ({type(exc).__name__}: {exc})"[:300]) from None
    if root is None:
        raise bad("is a malformed pickle (no STOP)")
    nodes, depth, tensor_bytes = _measure(root, caps, bad)
    storage_bytes = sum(numel * _element_size(dtype) for dtype, numel in storages.values())
    return Summary(nodes=nodes, depth=depth, tensor_bytes=tensor_bytes,
                   storage_bytes=storage_bytes, ops=ops)


# The opcodes of protocol 2 that torch.save writes for plain data (a subset of what the
# weights-only unpickler reads); any other opcode is refused.
_PUSH_ARG = frozenset({"BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT"})
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}


_NO_ARG = {ord(op.code): op.name for op in pickletools.opcodes if op.arg is None}
_ALL_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}
_FIXED = {ord("K"): ("BININT1", 1, False), ord("M"): ("BININT2", 2, False),
          ord("J"): ("BININT", 4, True), ord("q"): ("BINPUT", 1, False),
          ord("r"): ("LONG_BINPUT", 4, False), ord("h"): ("BINGET", 1, False),
          ord("j"): ("LONG_BINGET", 4, False), 0x80: ("PROTO", 1, False)}


def _opcodes(data: bytes) -> Any:
    """(name, argument) for each opcode of a pickle, as `pickletools.genops` would decode it,
    for the opcodes plain data uses (others are named, with no argument, and then refused);
    several times faster than genops on the small pickles of rank results."""
    pos, end = 0, len(data)
    while pos < end:
        code = data[pos]
        pos += 1
        fixed = _FIXED.get(code)
        if fixed is not None:
            name, width, signed = fixed
            if pos + width > end:
                raise ValueError("truncated")
            yield name, int.from_bytes(data[pos:pos + width], "little", signed=signed)
            pos += width
        elif code == 0x58:  # BINUNICODE
            size = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
            if pos + size > end:
                raise ValueError("truncated")
            yield "BINUNICODE", str(data[pos:pos + size], "utf-8", "surrogatepass")
            pos += size
        elif code == 0x47:  # BINFLOAT
            if pos + 8 > end:
                raise ValueError("truncated")
            yield "BINFLOAT", struct.unpack(">d", data[pos:pos + 8])[0]
            pos += 8
        elif code == 0x8A:  # LONG1
            size = data[pos] if pos < end else 0
            if pos + 1 + size > end:
                raise ValueError("truncated")
            yield "LONG1", int.from_bytes(data[pos + 1:pos + 1 + size], "little", signed=True)
            pos += 1 + size
        elif code == 0x63:  # GLOBAL: "module\nname\n"
            first = data.index(b"\n", pos)
            second = data.index(b"\n", first + 1)
            yield "GLOBAL", (data[pos:first].decode("utf-8") + " "
                             + data[first + 1:second].decode("utf-8"))
            pos = second + 1
        elif code in _NO_ARG:
            yield _NO_ARG[code], None
            if code == 0x2E:  # STOP
                return
        else:
            yield _ALL_NAMES.get(code, f"0x{code:02x}"), None
    raise ValueError("no STOP")


def _kind(value: Any) -> str:
    return value.kind if isinstance(value, _Obj) else type(value).__name__


def _element_size(dtype: torch.dtype) -> int:
    return dtype.itemsize


_ALLOWED_GLOBALS = {"torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_tensor_v3",
                    "collections OrderedDict", "torch.storage UntypedStorage"}


def _global(name: str, bad: Any) -> _Obj:
    module, _, attr = name.partition(" ")
    if name in _ALLOWED_GLOBALS:
        return _Obj("global", info=name)
    if module == "torch" and (attr in _STORAGE_TYPES or attr in _DTYPES):
        return _Obj("global", info=name)
    raise bad(f"refers to {name.replace(' ', '.')[:100]}, which plain data never needs")


def _storage(pid: Any, records: dict[str, zipfile.ZipInfo],
             storages: dict[str, tuple[torch.dtype, int]], bad: Any) -> _Obj:
    items = pid.items if isinstance(pid, _Obj) and pid.kind == "tuple" else None
    if (items is None or len(items) != 5 or items[0] != "storage"
            or not isinstance(items[1], _Obj) or items[1].kind != "global"
            or type(items[2]) is not str or type(items[3]) is not str
            or type(items[4]) is not int or items[4] < 0):
        raise bad("names a storage in an unexpected way")
    type_name = items[1].info.partition(" ")[2]
    if type_name == "UntypedStorage":
        dtype = torch.uint8
    elif type_name in _STORAGE_TYPES:
        dtype = _STORAGE_TYPES[type_name]
    else:
        raise bad(f"names a storage of type {type_name[:60]}")
    key, numel = items[2], items[4]
    if items[3] != "cpu" and not items[3].startswith("cuda"):
        raise bad(f"names a storage on {items[3][:40]!r}")
    if storages.setdefault(key, (dtype, numel)) != (dtype, numel):
        raise bad(f"names storage {key[:40]!r} twice with different types or sizes")
    record = records.get(f"data/{key}")
    nbytes = numel * _element_size(dtype)
    if record is None or record.file_size != nbytes:
        raise bad(f"declares a storage of {nbytes} bytes that the archive does not hold")
    return _Obj("storage", info=(dtype, key, numel))


def _reduce(fn: Any, args: Any, caps: Caps, bad: Any) -> _Obj:
    if not isinstance(fn, _Obj) or fn.kind != "global" or not isinstance(args, _Obj) \
            or args.kind != "tuple":
        raise bad("calls something that is not a known constructor")
    items = args.items
    if fn.info == "collections OrderedDict":
        if items:
            raise bad("builds an OrderedDict from arguments")
        return _Obj("hooks")
    if fn.info == "torch._utils _rebuild_tensor_v2":
        if len(items) not in (6, 7):
            raise bad("rebuilds a tensor with unexpected arguments")
        storage, offset, size, stride, requires_grad, hooks = items[:6]
        dtype = storage.info[0] if isinstance(storage, _Obj) and storage.kind == "storage" \
            else None
    elif fn.info == "torch._utils _rebuild_tensor_v3":
        if len(items) not in (7, 8):
            raise bad("rebuilds a tensor with unexpected arguments")
        storage, offset, size, stride, requires_grad, hooks, dtype_obj = items[:7]
        attr = dtype_obj.info.partition(" ")[2] if isinstance(dtype_obj, _Obj) \
            and dtype_obj.kind == "global" else ""
        dtype = _DTYPES.get(attr)
        if dtype is None or not isinstance(storage, _Obj) or storage.info[0] != torch.uint8:
            raise bad("rebuilds a tensor with unexpected arguments")
    else:
        raise bad(f"calls {fn.info.replace(' ', '.')[:100]}, which plain data never needs")
    if len(items) == (7 if fn.info.endswith("v2") else 8):  # metadata: an empty dict only
        metadata = items[-1]
        if not isinstance(metadata, _Obj) or metadata.kind != "dict" or metadata.items:
            raise bad("rebuilds a tensor with metadata")
    if (dtype is None or not isinstance(storage, _Obj) or storage.kind != "storage"
            or type(offset) is not int or type(requires_grad) is not bool
            or not isinstance(hooks, _Obj) or hooks.kind != "hooks" or hooks.items):
        raise bad("rebuilds a tensor with unexpected arguments")
    shape = _ints(size)
    strides = _ints(stride)
    if shape is None or strides is None or len(shape) > caps.max_ndim:
        raise bad("rebuilds a tensor with a malformed shape or strides")
    elsize = _element_size(dtype)
    storage_numel = storage.info[2] * _element_size(storage.info[0]) // elsize
    why = check_view(shape, strides, offset, storage_numel)
    if why:
        raise bad(f"holds a tensor that {why}")
    numel = 1
    for s in shape:
        numel *= s
    return _Obj("tensor", info=numel * elsize)


def _ints(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, _Obj) or value.kind != "tuple":
        return None
    if not all(type(v) is int for v in value.items):
        return None
    return tuple(value.items)


def _measure(root: Any, caps: Caps, bad: Any) -> tuple[int, int, int]:
    """(nodes, depth, tensor bytes) of the value as a naive walk would meet it, in time linear
    in the pickle: each container is measured once and its total reused where it is shared."""
    if type(root) is not _Obj:
        return (1, 0, 0)
    if root.kind == "tensor":
        return (1, 0, root.info)
    if root.kind not in _CONTAINERS:
        raise bad(f"holds a {root.kind} object where plain data belongs")
    done: dict[int, tuple[int, int, int]] = {}
    active = {id(root)}
    stack: list[tuple[_Obj, int]] = [(root, 0)]
    while stack:
        obj, index = stack[-1]
        items = obj.items
        while index < len(items):  # descend into the next container not measured yet
            child = items[index]
            index += 1
            if type(child) is _Obj and child.kind in _CONTAINERS and id(child) not in done:
                if id(child) in active:
                    raise bad("contains itself (a cycle of references)")
                if len(stack) >= caps.max_depth:
                    raise bad(f"is nested more than {caps.max_depth} levels deep")
                stack[-1] = (obj, index)
                active.add(id(child))
                stack.append((child, 0))
                break
        else:
            nodes, depth, nbytes = 1, 0, 0
            for child in items:
                if type(child) is not _Obj:
                    nodes += 1
                elif child.kind == "tensor":
                    nodes += 1
                    nbytes += child.info
                elif child.kind in _CONTAINERS:
                    n, d, b = done[id(child)]
                    nodes += n
                    nbytes += b
                    depth = max(depth, d)
                else:
                    raise bad(f"holds a {child.kind} object where plain data belongs")
            depth += 1
            if depth > caps.max_depth:
                raise bad(f"is nested more than {caps.max_depth} levels deep")
            if nodes > caps.max_nodes:
                raise bad(f"expands to more than {caps.max_nodes} nodes (shared references "
                          f"are counted once per path)")
            if nbytes > caps.max_bytes:
                raise bad(f"holds tensors of more than {caps.max_bytes} bytes (numel × "
                          f"element size, counted once per path)")
            done[id(obj)] = (nodes, depth, nbytes)
            active.discard(id(obj))
            stack.pop()
    return done[id(root)]
