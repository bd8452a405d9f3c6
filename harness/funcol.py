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


def block() -> int:
    """Make every functional collective op raise ForbiddenCallError in this process. Returns
    how many ops were blocked (0 where torch has none)."""
    import torch

    try:
        import torch.distributed._functional_collectives  # registers the ops
    except ImportError:
        return 0
    names = [name for name in torch._C._dispatch_get_all_op_names()
             if name.partition("::")[0] in NAMESPACES]
    with warnings.catch_warnings():  # "overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        by_namespace: dict[str, Any] = {}
        for full in names:
            namespace, _, op = full.partition("::")
            library = by_namespace.get(namespace)
            if library is None:
                library = by_namespace[namespace] = torch.library.Library(namespace, "IMPL")
                _libraries.append(library)
            library.impl(op, _refuse(f"torch.ops.{namespace}.{op}"), KEY)
    return len(names)
