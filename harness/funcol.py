"""Functional collectives in ranks: carried by the sidecar, or not available at all.

`torch.distributed._functional_collectives` and the dispatcher ops behind it
(`torch.ops._c10d_functional.*`, ...) go from C++ to the backend without passing through any
function the in-rank communication log wraps. Under the sidecar transport they reach the
rank's `SidecarGroup` like every other operation, so they are carried and counted on the wire.
Under the in-rank transport nothing would count them, so `block()` — called in the rank before
the rank function is unpickled, unless the launch asked for them (`launch(...,
functional_collectives=True)`, for launches that judge values only) — replaces their kernel at
the dispatcher (the `CompositeExplicitAutograd` key, where torch registers it) with one that
raises: every route to the op, from Python or C++, a fresh op namespace or a redispatch, ends
there. What is left: code that registers a kernel of its own needs `torch.library` and the op
names (screened: `torch.ops`, private `torch.distributed` modules), and gains nothing — the
original kernel is not reachable once replaced.
"""

from __future__ import annotations

import warnings
from typing import Any

from harness.errors import ForbiddenCallError

NAMESPACES = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "_dtensor")
KEY = "CompositeExplicitAutograd"
_libraries: list[Any] = []  # kept alive: dropping a Library removes its registrations


def _refuse(name: str):
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ForbiddenCallError(
            f"{name} is a functional collective: it goes around the harness's communication "
            f"log, so it is not available in this launch; use torch.distributed's own "
            f"collectives (dist.all_reduce, dist.all_gather_into_tensor, ...)")

    return refused


# Where torch already holds a Python kernel for an op at `KEY` (torch 2.11 does for
# `_wrap_tensor_autograd`), a second one is refused; the backend keys come before the composite
# key in dispatch, so a refusing kernel there serves as well.
BACKEND_KEYS = ("CPU", "CUDA")
skipped: list[str] = []  # ops no kernel could be registered for (none on the pinned torch)


def block() -> int:
    """Make every functional collective op raise ForbiddenCallError in this process. Returns
    how many ops were blocked (0 where torch has none); an op whose kernel cannot be replaced
    at any key is left as it is and named in `skipped`, never a crash of the rank."""
    import torch

    try:
        import torch.distributed._functional_collectives  # registers the ops
    except ImportError:
        return 0
    names = [name for name in torch._C._dispatch_get_all_op_names()
             if name.partition("::")[0] in NAMESPACES]
    blocked = 0
    with warnings.catch_warnings():  # "overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        by_namespace: dict[str, Any] = {}
        for full in names:
            namespace, _, op = full.partition("::")
            library = by_namespace.get(namespace)
            if library is None:
                library = by_namespace[namespace] = torch.library.Library(namespace, "IMPL")
                _libraries.append(library)
            blocked += _replace(library, op, _refuse(f"torch.ops.{namespace}.{op}"), full)
    return blocked


def _replace(library: Any, op: str, kernel: Any, full: str) -> int:
    """1 when `kernel` now answers for `op` (at `KEY`, else at every backend key), else 0."""
    try:
        library.impl(op, kernel, KEY)
        return 1
    except RuntimeError:
        pass
    try:
        for key in BACKEND_KEYS:
            library.impl(op, kernel, key)
        return 1
    except RuntimeError:
        skipped.append(full)
        return 0
