"""`ComputeGuard`: fail a kernel wrapper that computes with torch instead of launching kernels.

Rank side. A wrapper such as `softmax(x)` of the Triton assignment may allocate its outputs,
look at shapes and strides, make views and copies, and launch `@triton.jit` kernels; the
arithmetic itself must happen inside the kernels. Inside `with ComputeGuard("softmax"):` every
aten operator is seen (a `TorchDispatchMode`) and judged by these rules, in order:

1. An operator whose nearest caller outside torch lives in the `triton` package is allowed:
   Triton's own machinery (the interpreter copies arguments with `untyped_storage().cpu()`,
   `set_` and `copy_` around every launch under TRITON_INTERPRET=1; the autotuner allocates
   benchmark buffers). Code of the wrapper or of a kernel body never qualifies, even when
   triton calls it (a lambda handed to `triton.testing.do_bench`).
2. Allocation, view, metadata and copy operators (`ALLOWED_OPS`: `empty*`, `zeros*`,
   `full*`, `view`, `reshape`, `transpose`, `contiguous`, `to`, `copy_`, ...) are allowed.
3. An operator that reads no floating-point tensor is allowed: factories and integer
   bookkeeping such as `int(context_lens.max())`.
4. Anything else — `matmul`, `softmax`, `exp`, `add`, `sum`, indexing a float tensor with a
   tensor (a gather), ... — is a violation: recorded in `guard.violations` and, when
   `strict` (the default), raised at once as `ForbiddenComputeError`.

The guard is for one thread; the rank runs the wrapper on its main thread.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

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
    if frame is None or _TRITON_DIR is None:
        return False
    return os.path.abspath(frame.f_code.co_filename).startswith(_TRITON_DIR)


def _describe_frame(frame: FrameType | None) -> str:
    if frame is None:
        return "<unknown>"
    return (f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} "
            f"in {frame.f_code.co_name}")


def _float_input_dtype(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    """The dtype of the first floating-point (or complex) tensor among the inputs, if any."""
    leaves, _ = tree_flatten((args, kwargs))
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            return leaf.dtype
    return None


class ComputeGuard(TorchDispatchMode):
    """Context manager: judge every torch operator run inside it (see the module docstring).

    Args:
        what: names the guarded call in messages, e.g. "softmax".
        strict: raise `ForbiddenComputeError` at the first violation (True), or only record
            it in `violations` (False) so the caller can report every one after the call.
        allow: extra operator names (aten overload packets, e.g. "cumsum") to allow.

    `violations` (list of ComputeViolation), `allowed_ops` (names allowed by rules 2 and 3)
    and `triton_ops` (names run by triton itself, rule 1) are filled as operators run.
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

    def __enter__(self) -> ComputeGuard:
        super().__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(exc_type, exc, tb)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        caller = _caller_frame(sys._getframe(1))
        if _is_triton_internal(caller):
            self.triton_ops.add(name)
        else:
            dtype = _float_input_dtype(args, kwargs)
            if name not in self.allow and dtype is not None:
                self._violation(f"{func.namespace}.{name}", dtype, caller)
            else:
                self.allowed_ops.add(name)
        return func(*args, **kwargs)

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
