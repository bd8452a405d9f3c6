"""What travels to the ranks for the framework suite: rank functions and their helpers.

One launch per test module (two for compile, whose launches are slow); each case runs under
`harness.cases.run_cases` in its own error scope, so a stub fails only its own cases. Ranks get
tensors and return what the code under test produced, plus what the suite's own instruments
saw in the rank (bytes packed by saved-tensor hooks, graphs handed to a counting backend,
Dynamo's counters): the parent judges all of it against its own references.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from grader.suites.framework._ranks_programs import (
    CHECKPOINTED,
    FLOP_PROGRAMS,
    FX_FUNCTIONS,
    SAVED_FUNCTIONS,
)
from harness.cases import run_cases

ID = "framework"


def leaves(tensors: list[torch.Tensor], grads: list[bool]) -> list[torch.Tensor]:
    """Fresh leaf copies of `tensors`, each requiring grad as `grads` says."""
    return [t.detach().clone().requires_grad_(g) for t, g in zip(tensors, grads, strict=True)]


def packed_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(fn(), bytes of the distinct storages autograd packed while it ran): README §3.1's
    definition, measured by the suite's own hooks."""
    sizes: dict[tuple[int, str], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.nbytes() > 0:
            sizes[(storage.data_ptr(), str(t.device))] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(sizes.values())


# ---- FLOPs -------------------------------------------------------------------------------------

def _count_both(module: Any, case: dict) -> dict:
    xs = leaves(case["tensors"], case["grads"])
    program = FLOP_PROGRAMS[case["program"]]
    with module.FlopCounter() as forward:
        out = program(*xs)
    with module.FlopCounter() as backward:
        out.backward(case["grad_out"])
    return {"forward": forward.flops, "backward": backward.flops, "out": out.detach()}


def _forward_backward(module: Any, case: dict) -> dict:
    xs = leaves(case["tensors"], case["grads"])
    program = FLOP_PROGRAMS[case["program"]]
    counts = module.forward_backward_flops(lambda: program(*xs))
    return {"counts": counts, "grads": [x.grad for x in xs]}


def rank_flops(ctx: Any, cases: dict[str, dict]) -> dict:
    module = ctx.impl_module(ID, "flops")
    jobs = []
    for name, case in cases.items():
        run = _forward_backward if case["via"] == "forward_backward_flops" else _count_both
        jobs.append((name, lambda run=run, case=case: run(module, case)))
    return run_cases(ctx, jobs)


# ---- autograd memory ---------------------------------------------------------------------------

def _saved(module: Any, case: dict) -> int:
    xs = leaves(case["tensors"], case["grads"])
    return module.saved_tensor_bytes(SAVED_FUNCTIONS[case["fn"]], *xs)


def _checkpoint(module: Any, case: dict) -> dict:
    xs = leaves(case["tensors"], case["grads"])
    fn = CHECKPOINTED[case["fn"]]
    out, saved = packed_bytes(lambda: module.checkpoint(fn, *xs))
    inputs_unchanged = all(torch.equal(x, t) for x, t in zip(xs, case["tensors"], strict=True))
    out.backward(case["grad_out"])
    return {"out": out.detach(), "saved": saved, "grads": [x.grad for x in xs],
            "inputs_unchanged": inputs_unchanged}


def _swiglu(module: Any, case: dict) -> dict:
    gate, up = leaves(case["tensors"], case["grads"])
    out, saved = packed_bytes(lambda: module.swiglu(gate, up))
    out.backward(case["grad_out"])
    return {"out": out.detach(), "saved": saved, "grads": [gate.grad, up.grad]}


def _gradcheck(module: Any, case: dict) -> dict:
    xs = leaves(case["tensors"], case["grads"])
    ok = torch.autograd.gradcheck(module.swiglu, tuple(xs), raise_exception=False)
    return {"ok": bool(ok)}


MEMORY_RUNS = {"saved": _saved, "checkpoint": _checkpoint, "swiglu": _swiglu,
               "gradcheck": _gradcheck}


def rank_memory(ctx: Any, cases: dict[str, dict]) -> dict:
    module = ctx.impl_module(ID, "autograd_memory")
    return run_cases(ctx, [(name, lambda case=case: MEMORY_RUNS[case["run"]](module, case))
                           for name, case in cases.items()])


# ---- torch.compile -----------------------------------------------------------------------------

def _fresh_dynamo() -> Any:
    """Dynamo with no cached graph and zeroed counters; its counters object."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    return counters


def _counting_backend(graphs: list[int]) -> Callable[..., Any]:
    """An `eager` backend that records the node count of every graph Dynamo hands it."""
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(len(gm.graph.nodes))
        return gm.forward
    return backend


def _dynamo_report(counters: Any, graphs: list[int]) -> dict:
    return {"graphs": len(graphs),
            "breaks": {str(reason)[:300]: int(n) for reason, n in counters["graph_break"].items()},
            "unique_graphs": int(counters["stats"]["unique_graphs"])}


def _load(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    model.load_state_dict(state)
    return model


def _friendly_values(module: Any, case: dict) -> list[torch.Tensor]:
    # the documented defaults are dim=16, hidden=32: the case's sizes
    built = module.FriendlyMLP() if case.get("defaults") else module.FriendlyMLP(case["dim"],
                                                                                 case["hidden"])
    model = _load(built, case["state"])
    with torch.no_grad():
        return [model(x) for x in case["inputs"]]


def _friendly_graphs(module: Any, case: dict) -> dict:
    model = _load(module.FriendlyMLP(case["dim"], case["hidden"]), case["state"])
    counters = _fresh_dynamo()
    graphs: list[int] = []  # node counts of the graphs Dynamo compiled
    compiled = torch.compile(model, backend=_counting_backend(graphs), dynamic=True)
    with torch.no_grad():
        for x in case["inputs"]:
            compiled(x)
    return _dynamo_report(counters, graphs)


def _compile_model(module: Any, case: dict) -> dict:
    d, h = case["dim"], case["hidden"]
    model = _load(torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.GELU(),
                                      torch.nn.Linear(h, d)), case["state"])
    counters = _fresh_dynamo()
    graphs: list[int] = []  # node counts of the graphs Dynamo compiled
    run = module.compile_model(model, _counting_backend(graphs))
    with torch.no_grad():
        outs = [run(x) for x in case["inputs"]]
        eager = [model(x) for x in case["inputs"]]
    return {**_dynamo_report(counters, graphs), "outs": outs, "eager": eager}


class _Breaking(torch.nn.Module):
    """A model with a graph break (a Python branch on a tensor's value): under fullgraph=True
    its compile must fail."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


def _compile_breaking(module: Any, case: dict) -> dict:
    _fresh_dynamo()
    run = module.compile_model(_Breaking(), "eager")
    try:
        with torch.no_grad():
            run(case["inputs"][0])
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001  (Dynamo's Unsupported, however it is wrapped)
        return {"raised": type(exc).__name__}
    return {"raised": None}


COMPILE_RUNS = {"friendly_values": _friendly_values, "friendly_graphs": _friendly_graphs,
                "compile_model": _compile_model, "compile_breaking": _compile_breaking}


def rank_compile(ctx: Any, cases: dict[str, dict]) -> dict:
    module = ctx.impl_module(ID, "compile_friendly")
    try:
        return run_cases(ctx, [(name, lambda case=case: COMPILE_RUNS[case["run"]](module, case))
                               for name, case in cases.items()])
    finally:
        _fresh_dynamo()


# ---- FX ----------------------------------------------------------------------------------------

def node_kinds(gm: Any) -> list[str]:
    """One word per compute node of `gm`'s graph: silu, add_relu, sigmoid, mul, add, relu,
    or `other`; placeholders and the output are left out."""
    from assignments.framework.fused_ops import add_relu

    by_target = {F.silu: "silu", add_relu: "add_relu", torch.sigmoid: "sigmoid",
                 operator.mul: "mul", torch.mul: "mul", operator.add: "add", torch.add: "add",
                 torch.relu: "relu", F.relu: "relu"}
    kinds = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "call_method" and node.target in ("sigmoid", "mul", "add", "relu"):
            kinds.append(str(node.target))
        elif node.op == "call_function" and node.target in by_target:
            kinds.append(by_target[node.target])
        else:
            kinds.append("other")
    return kinds


def _fuse(module: Any, case: dict) -> dict:
    gm = torch.fx.symbolic_trace(FX_FUNCTIONS[case["fn"]])
    out_gm = module.fuse_patterns(gm)
    is_graph_module = isinstance(out_gm, torch.fx.GraphModule)
    code = out_gm.code if is_graph_module else ""
    return {"is_graph_module": is_graph_module,
            "kinds": node_kinds(out_gm) if is_graph_module else [],
            "code_calls": {"silu": code.count("functional.silu("),
                           "add_relu": code.count("add_relu(")},
            "out": out_gm(*case["inputs"]) if is_graph_module else None}


def _backend(module: Any, case: dict) -> dict:
    _fresh_dynamo()
    seen: list[list[str]] = []
    stubbed: list[NotImplementedError] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        try:
            result = module.fusing_backend(gm, example_inputs)
        except NotImplementedError as exc:  # Dynamo would wrap it: re-raised below, as is
            stubbed.append(exc)
            return gm.forward
        seen.append(node_kinds(result) if isinstance(result, torch.fx.GraphModule) else [])
        return result

    try:
        compiled = torch.compile(FX_FUNCTIONS[case["fn"]], backend=backend, fullgraph=True)
        out = compiled(*case["inputs"])
    finally:
        _fresh_dynamo()
    if stubbed:
        raise stubbed[0]
    return {"out": out, "graphs": seen}


FX_RUNS = {"fuse": _fuse, "backend": _backend}


def rank_fx(ctx: Any, cases: dict[str, dict]) -> dict:
    module = ctx.impl_module(ID, "fx_fusion")
    return run_cases(ctx, [(name, lambda case=case: FX_RUNS[case["run"]](module, case))
                           for name, case in cases.items()])
