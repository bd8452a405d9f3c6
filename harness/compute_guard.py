"""`ComputeGuard`: fail a kernel wrapper that computes with torch instead of launching kernels.

Rank side. A wrapper such as `softmax(x)` of the Triton assignment may allocate its outputs,
look at shapes and strides, make views and copies, and launch `@triton.jit` kernels; the
arithmetic itself must happen inside the kernels. Inside `with ComputeGuard("softmax"):` every
aten operator is seen (a `TorchDispatchMode`) and judged by these rules, in order:

1. Allocation, view, metadata and copy operators (`ALLOWED_OPS`: `empty*`, `zeros*`,
   `full*`, `view`, `reshape`, `transpose`, `contiguous`, `to`, `copy_`, ...) are allowed,
   whoever calls them. Triton's interpreter needs no more than these (it copies arguments
   with `untyped_storage().cpu()`, `set_` and `copy_` around every launch).
2. Reading a number out of a floating-point tensor (`float(x[i])`, `.item()`: the operator
   `_local_scalar_dense`) is a violation unless Triton's own code does it: a wrapper that
   reads its data into Python computes outside any kernel.
3. An operator that reads no floating-point tensor, and no tensor derived from one inside the
   guard (`x.to(torch.int64)` is *tainted*), is allowed: factories and integer bookkeeping on
   integer inputs, such as `int(context_lens.max())`.
4. Anything else — `matmul`, `softmax`, `exp`, `add`, `sum`, indexing a float tensor with a
   tensor (a gather), arithmetic on tainted integers, ... — is a violation: recorded in
   `guard.violations` and, when `strict` (the default), raised at once as
   `ForbiddenComputeError`.

Triton's own code is recognised by identity, not by name: `TRITON_CODE` holds the code objects
of the triton package, collected when this module is first imported — in a rank, when the rank
function is unpickled, before the code under test is imported. A function the submission
compiles with a file name inside triton's folder is not among them. Kernel launches are counted
(`launches`) by wrappers put on Triton's two launch entry points at the same moment
(`GridExecutor.__call__` of the interpreter, `JITFunction.run` compiled); `__exit__` checks
that both are still in place, and records a violation if the code under test replaced them.

This is an in-rank instrument, a first line: code under test shares its address space. The
parent-side half is the static screen's `kernel-wrappers` rule, which rejects the ways of
computing that no operator shows (`.tolist()`, `.numpy()`, numpy, torch names other than
allocation and metadata). docs/trust.md says what stays out of reach.

The guard is for one thread; the rank runs the wrapper on its main thread.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType, FunctionType, TracebackType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

# Operator overload packets (aten names without the overload) that never do arithmetic on
# the data: allocation, metadata, views and plain copies (dtype conversion included).
ALLOWED_OPS: frozenset[str] = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "zero_", "ones", "ones_like", "new_ones",
    "full", "full_like", "new_full", "fill_", "scalar_tensor", "lift_fresh", "lift_fresh_copy",
    "resize_", "set_",
    # metadata
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel",
    "dim", "is_contiguous", "is_same_size", "is_complex", "is_floating_point",
    "_local_scalar_dense",
    # views
    "view", "_unsafe_view", "reshape", "as_strided", "alias", "detach", "t", "transpose",
    "permute", "expand", "expand_as", "slice", "select", "narrow", "unsqueeze", "squeeze",
    "flatten", "unflatten", "unbind", "split", "split_with_sizes", "chunk", "movedim",
    "view_as", "unfold", "diagonal", "_reshape_alias",
    # copies
    "clone", "contiguous", "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
})

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_THIS_FILE = os.path.abspath(__file__)
# Reading one number out of a tensor: allowed on integers, a violation on float data.
_SCALAR_READ = "_local_scalar_dense"


def _package_dir(name: str) -> str | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(list(spec.submodule_search_locations)[0]) + os.sep


_TRITON_DIR = _package_dir("triton")
# The triton modules whose code runs around a launch; imported before the snapshot so that
# none of them is first imported (and so unknown) after the code under test.
_TRITON_MODULES = ("triton", "triton.language", "triton.runtime.jit",
                   "triton.runtime.interpreter", "triton.runtime.autotuner", "triton.testing")


def _code_objects(value: Any, found: dict[int, CodeType], seen: set[int]) -> None:
    """Add the code objects of a function, class or code object (and those nested in it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, CodeType):
            found[id(item)] = item
            stack.extend(c for c in item.co_consts if isinstance(c, CodeType))
        elif isinstance(item, FunctionType):
            stack.append(item.__code__)
        elif isinstance(item, (staticmethod, classmethod)):
            stack.append(item.__func__)
        elif isinstance(item, property):
            stack.extend(f for f in (item.fget, item.fset, item.fdel) if f is not None)
        elif isinstance(item, type):
            stack.extend(vars(item).values())


def _snapshot_triton() -> dict[int, CodeType]:
    """id -> code object of every function and method the triton package defines (the dict
    keeps them alive, so no id is reused). Empty when triton is not installed."""
    if _TRITON_DIR is None:
        return {}
    for name in _TRITON_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a partial triton install: fewer codes, never a crash
            pass
    found: dict[int, CodeType] = {}
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if name != "triton" and not name.startswith("triton."):
            continue
        for value in list(vars(module).values()):
            owner = getattr(value, "__module__", None)
            if isinstance(value, (FunctionType, type)) and owner == name:
                _code_objects(value, found, seen)
    return found


TRITON_CODE: dict[int, CodeType] = _snapshot_triton()


class _LaunchCounter:
    """Counts calls of Triton's launch entry points, through wrappers put on their classes."""

    def __init__(self) -> None:
        self.count = 0
        self.installed: list[tuple[type, str, Callable[..., Any]]] = []

    def install(self) -> None:
        if _TRITON_DIR is None:
            return
        targets = [("triton.runtime.interpreter", "GridExecutor", "__call__"),
                   ("triton.runtime.jit", "JITFunction", "run")]
        for module_name, class_name, method in targets:
            cls = getattr(sys.modules.get(module_name), class_name, None)
            original = getattr(cls, method, None) if cls is not None else None
            if cls is None or not callable(original):
                continue
            wrapper = self._wrap(original)
            setattr(cls, method, wrapper)
            self.installed.append((cls, method, wrapper))

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        def launch(*args: Any, **kwargs: Any) -> Any:
            counter.count += 1
            return original(*args, **kwargs)

        return launch

    def intact(self) -> bool:
        """Whether every wrapper is still where it was put."""
        return all(vars(cls).get(method) is wrapper for cls, method, wrapper in self.installed)


_LAUNCHES = _LaunchCounter()
_LAUNCHES.install()


class ForbiddenComputeError(RuntimeError):
    """A guarded wrapper ran a torch compute operator; the message names it and where."""


@dataclass(frozen=True)
class ComputeViolation:
    """One forbidden operator call: `op` ("aten.exp"), the input `dtype`, and `where`
    ("kernels.py:42 in softmax", the nearest caller outside torch)."""

    op: str
    dtype: str
    where: str

    def describe(self) -> str:
        return f"{self.op} on a {self.dtype} tensor at {self.where}"


def _caller_frame(start: FrameType | None) -> FrameType | None:
    """The nearest frame outside torch and outside this module."""
    frame = start
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_TORCH_DIR) and filename != _THIS_FILE:
            return frame
        frame = frame.f_back
    return None


def _is_triton_internal(frame: FrameType | None) -> bool:
    """Whether `frame` runs code of the real triton package (by identity: see TRITON_CODE)."""
    return frame is not None and TRITON_CODE.get(id(frame.f_code)) is frame.f_code


def _describe_frame(frame: FrameType | None) -> str:
    if frame is None:
        return "<unknown>"
    return (f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} "
            f"in {frame.f_code.co_name}")


def _tensor_leaves(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((args, kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _is_float(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


class ComputeGuard(TorchDispatchMode):
    """Context manager: judge every torch operator run inside it (see the module docstring).

    Args:
        what: names the guarded call in messages, e.g. "softmax".
        strict: raise `ForbiddenComputeError` at the first violation (True), or only record
            it in `violations` (False) so the caller can report every one after the call.
        allow: extra operator names (aten overload packets, e.g. "cumsum") to allow.

    `violations` (list of ComputeViolation), `allowed_ops` (names allowed by rules 1 and 3),
    `triton_ops` (names run by triton's own code) and `launches` (Triton kernel launches
    inside the block; set on exit) are filled as operators run.
    Raising does not depend on the code under test letting the exception through:
    `violations` keeps the record either way.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else the first op imports torch._dynamo (seconds) to disable it here

    def __init__(self, what: str = "the wrapper", *, strict: bool = True,
                 allow: frozenset[str] | set[str] = frozenset()) -> None:
        super().__init__()
        self.what = what
        self.strict = strict
        self.allow = ALLOWED_OPS | frozenset(allow)
        self.violations: list[ComputeViolation] = []
        self.allowed_ops: set[str] = set()
        self.triton_ops: set[str] = set()
        self.launches = 0
        self._launches_before = 0
        self._tainted = WeakIdKeyDictionary()  # tensor -> True, by identity

    def __enter__(self) -> ComputeGuard:
        self._launches_before = _LAUNCHES.count
        super().__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(exc_type, exc, tb)
        self.launches = _LAUNCHES.count - self._launches_before
        if not _LAUNCHES.intact():
            self.violations.append(ComputeViolation(
                op="triton launch path replaced", dtype="-", where="the code under test"))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        caller = _caller_frame(sys._getframe(1))
        triton = _is_triton_internal(caller)
        tensors = _tensor_leaves(args, kwargs)
        floats = [t for t in tensors if _is_float(t)]
        reads_data = bool(floats) or any(t in self._tainted for t in tensors)
        if triton:
            self.triton_ops.add(name)
        if name == _SCALAR_READ:
            if reads_data and not triton:
                self._violation(f"{func.namespace}.{name}", tensors[0].dtype, caller)
        elif name in self.allow or not reads_data:
            self.allowed_ops.add(name)
        else:
            dtype = floats[0].dtype if floats else tensors[0].dtype
            self._violation(f"{func.namespace}.{name}", dtype, caller)
        out = func(*args, **kwargs)
        if reads_data:  # integers made from float data are float data in disguise
            for t in (*tensors, *_tensor_leaves((out,), {})):
                if not _is_float(t):
                    self._tainted[t] = True
        return out

    def _violation(self, op: str, dtype: torch.dtype, caller: FrameType | None) -> None:
        violation = ComputeViolation(op=op, dtype=str(dtype).removeprefix("torch."),
                                     where=_describe_frame(caller))
        self.violations.append(violation)
        if self.strict:
            raise ForbiddenComputeError(self.message())

    def message(self) -> str:
        """One line naming the first violation and the fix ("" when there is none)."""
        if not self.violations:
            return ""
        first = self.violations[0]
        more = f" (and {len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
        return (f"{self.what} computed with torch instead of a Triton kernel: "
                f"{first.describe()}{more}; the wrapper may only allocate outputs "
                f"(torch.empty*), view, reshape or copy tensors and launch kernels")
