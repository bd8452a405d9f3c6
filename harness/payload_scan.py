"""A rank's result file, validated from its bytes before anything is unpickled.

`inspect` walks the archive and the opcodes of its pickle symbolically (nothing is
materialised) and proves that loading it is bounded and yields plain data:

- the zip holds only what `torch.save` writes (`data.pkl`, `data/<key>` storages, version
  records), every entry stored uncompressed, no duplicates;
- the pickle uses only the opcodes and globals `torch.save` emits for plain data;
- each tensor is a plain strided view (`payload_rules.check_view`): no stride-0
  (expanded/broadcast), negative or overlapping strides, and its extent fits the storage it
  names, whose record has exactly the declared size;
- the result, counted as any naive consumer would walk it (a container reached twice counts
  twice; memoised, so the count itself is linear), has at most `caps.max_nodes` nodes and
  `caps.max_depth` levels, no cycle, and at most `caps.max_bytes` of tensor data (numel ×
  element size over every tensor, counted per path).

`harness/payload.py` (`load`) calls it; nothing here reads a file or calls `torch.load`.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import PayloadError
from harness.payload_rules import CAPS, Caps, check_view
from harness.pickle_opcodes import read_opcodes


@dataclass(frozen=True)
class Summary:
    """What `inspect` found: the value as a naive walk would meet it."""

    nodes: int
    depth: int
    tensor_bytes: int
    storage_bytes: int
    ops: int


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
    machine = _Unpickler(records, caps, bad)
    ops = 0
    try:
        for name, arg in read_opcodes(pickled):
            ops += 1
            if ops > caps.max_ops:
                raise bad(f"is a pickle of more than {caps.max_ops} operations")
            if machine.step(name, arg):
                break
    except PayloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - decoding a forged file: any error is its fault
        raise bad(f"is a malformed pickle ({type(exc).__name__}: {exc})"[:300]) from None
    if machine.root is None:
        raise bad("is a malformed pickle (no STOP)")
    nodes, depth, tensor_bytes = _measure(machine.root, caps, bad)
    storage_bytes = sum(numel * _element_size(dtype)
                        for dtype, numel in machine.storages.values())
    return Summary(nodes=nodes, depth=depth, tensor_bytes=tensor_bytes,
                   storage_bytes=storage_bytes, ops=ops)


class _Unpickler:
    """The symbolic unpickler: one method per family of allowed opcodes (`_HANDLERS`), each
    acting on the stack of `_Obj`s and plain values; `step` returns True at STOP."""

    def __init__(self, records: dict[str, zipfile.ZipInfo], caps: Caps, bad: Any) -> None:
        self.records, self.caps, self.bad = records, caps, bad
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.storages: dict[str, tuple[torch.dtype, int]] = {}
        self.root: Any = None

    def step(self, name: str, arg: Any) -> bool:
        handler = _HANDLERS.get(name)
        if handler is None:
            raise self.bad(f"uses the pickle operation {name}, which plain data never needs")
        return bool(getattr(self, handler)(name, arg))

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.bad("is a malformed pickle (no mark)")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def pop(self) -> Any:
        if not self.stack:
            raise self.bad("is a malformed pickle (empty stack)")
        return self.stack.pop()

    def top(self, kind: str, what: str) -> _Obj:
        target = self.stack[-1] if self.stack else None
        if not isinstance(target, _Obj) or target.kind != kind:
            raise self.bad(f"is a malformed pickle ({what})")
        return target

    def memo_put(self, name: str, arg: Any) -> None:
        if not self.stack:
            raise self.bad("is a malformed pickle (memo of nothing)")
        self.memo[arg] = self.stack[-1]

    def memo_get(self, name: str, arg: Any) -> None:
        if arg not in self.memo:
            raise self.bad("is a malformed pickle (unknown memo key)")
        self.stack.append(self.memo[arg])

    def push_arg(self, name: str, arg: Any) -> None:
        self.stack.append(arg)

    def constant(self, name: str, arg: Any) -> None:
        self.stack.append(_CONSTANTS[name])

    def empty(self, name: str, arg: Any) -> None:
        self.stack.append(_Obj(name.removeprefix("EMPTY_").lower()))

    def mark(self, name: str, arg: Any) -> None:
        self.marks.append(self.stack)
        self.stack = []

    def tuple_marked(self, name: str, arg: Any) -> None:
        items = self.pop_mark()  # rebinds `stack`: take the items first
        self.stack.append(_Obj("tuple", items))

    def tuple_n(self, name: str, arg: Any) -> None:
        n = int(name[-1])
        if len(self.stack) < n:
            raise self.bad("is a malformed pickle (short stack)")
        items = self.stack[-n:]
        del self.stack[-n:]
        self.stack.append(_Obj("tuple", items))

    def append(self, name: str, arg: Any) -> None:
        items = [self.pop()] if name == "APPEND" else self.pop_mark()
        self.top("list", "append to a non-list").items.extend(items)

    def setitem(self, name: str, arg: Any) -> None:
        if name == "SETITEM":
            v, k = self.pop(), self.pop()
            items = [k, v]
        else:
            items = self.pop_mark()
        target = self.top("dict", "setitem on a non-dict")
        if len(items) % 2:
            raise self.bad("is a malformed pickle (setitem on a non-dict)")
        for k in items[0::2]:
            if type(k) not in (str, int):
                raise self.bad(f"has a dict key that is not a str or int ({_kind(k)})")
        target.items.extend(items[1::2])

    def global_(self, name: str, arg: Any) -> None:
        self.stack.append(_global(arg, self.bad))

    def persistent_id(self, name: str, arg: Any) -> None:
        self.stack.append(_storage(self.pop(), self.records, self.storages, self.bad))

    def reduce(self, name: str, arg: Any) -> None:
        args, fn = self.pop(), self.pop()
        self.stack.append(_reduce(fn, args, self.caps, self.bad))

    def proto(self, name: str, arg: Any) -> None:
        pass

    def stop(self, name: str, arg: Any) -> bool:
        if len(self.stack) != 1 or self.marks:
            raise self.bad("is a malformed pickle (stack at STOP)")
        self.root = self.stack[0]
        return True


# The opcodes of protocol 2 that torch.save writes for plain data (a subset of what the
# weights-only unpickler reads); any other opcode is refused.
_PUSH_ARG = frozenset({"BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT"})
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
# opcode -> the `_Unpickler` method that runs it
_HANDLERS = {
    "BINPUT": "memo_put", "LONG_BINPUT": "memo_put", "BINGET": "memo_get",
    "LONG_BINGET": "memo_get", **dict.fromkeys(_PUSH_ARG, "push_arg"),
    **dict.fromkeys(_CONSTANTS, "constant"),
    **dict.fromkeys(("EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE"), "empty"),
    "MARK": "mark", "TUPLE": "tuple_marked",
    **dict.fromkeys(("TUPLE1", "TUPLE2", "TUPLE3"), "tuple_n"),
    "APPEND": "append", "APPENDS": "append", "SETITEM": "setitem", "SETITEMS": "setitem",
    "GLOBAL": "global_", "BINPERSID": "persistent_id", "REDUCE": "reduce", "PROTO": "proto",
    "STOP": "stop",
}

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
            done[id(obj)] = _container_total(items, done, caps, bad)
            active.discard(id(obj))
            stack.pop()
    return done[id(root)]


def _container_total(items: list[Any], done: dict[int, tuple[int, int, int]], caps: Caps,
                     bad: Any) -> tuple[int, int, int]:
    """(nodes, depth, tensor bytes) of a container whose child containers are all in `done`;
    raises when a cap is passed."""
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
    return nodes, depth, nbytes
