"""What travels to the ranks of the moe hidden suite: `rank_all` runs every case of a launch,
each in its own error scope (`harness.cases.run_cases`), so a stubbed or broken function costs
only the tests that read its cases.

Cases arrive without their expected values (`_cases.run` strips them). A distributed case runs
on a group of its own; a rank that leaves out one of its collectives leaves the others waiting
there, the stall watch ends the launch, and `harness.cases.launch_cases` makes it again without
that case: the hang costs only its case, whatever the machine's load.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.cases import run_cases

DTYPE = torch.float64



def _case_group(ctx: Any) -> Any:
    """A group of every rank, this case's own: the layer and all_to_all_tokens are given a
    group (not the default one). It keeps the launch's collective timeout: a rank that leaves
    out a collective is found by the stall watch, and the case alone fails (see the module
    doc)."""
    return ctx.new_group(list(range(ctx.world_size)))


def _run_layer(ctx, m, name: str, c: dict) -> dict:
    from harness import storage_bytes

    r = ctx.rank
    p = c["params"]
    layer = m.MoELayer.from_dense(p["router"], p["w_gate"], p["w_up"], p["w_down"], k=c["k"],
                                  capacity_factor=c["cf"], group=_case_group(ctx))
    held = storage_bytes(layer)
    x = c["xs"][r].clone().requires_grad_()
    ctx.mark(f"{name} forward")
    y, logits = layer(x)
    ctx.mark(f"{name} backward")
    y.backward(c["grads"][r])
    ctx.mark(f"{name} end")

    def grad(t):
        return None if t.grad is None else t.grad

    return {"y": y.detach(), "logits": logits.detach(), "x_grad": x.grad,
            "router_grad": grad(layer.router.weight), "w_gate_grad": grad(layer.w_gate),
            "w_up_grad": grad(layer.w_up), "w_down_grad": grad(layer.w_down), "held": held}


def _run_a2a(ctx, m, name: str, c: dict) -> dict:
    r, world = ctx.rank, ctx.world_size
    send = list(c["splits"][r])
    recv = [c["splits"][i][r] for i in range(world)]
    x = c["xs"][r].clone().requires_grad_()
    ctx.mark(f"{name} forward")
    out = m.all_to_all_tokens(x, send, recv, _case_group(ctx))
    ctx.mark(f"{name} backward")
    out.backward(c["out_grads"][r])
    ctx.mark(f"{name} end")
    return {"out": out.detach(), "x_grad": x.grad}


def _run_unit(ctx, m, name: str, c: dict) -> Any:
    kind = c["kind"]
    if kind == "route":
        logits = c["logits"].clone().requires_grad_()
        weights, experts, probs = m.route(logits, c["k"])
        ((weights * c["w_grad"]).sum() + (probs * c["p_grad"]).sum()).backward()
        return {"weights": weights.detach(), "experts": experts, "probs": probs.detach(),
                "grad": logits.grad}
    if kind == "lb":
        logits = c["logits"].clone().requires_grad_()
        loss = m.load_balancing_loss(torch.softmax(logits, -1), c["experts"])
        loss.backward()
        return {"loss": loss.detach(), "grad": logits.grad}
    if kind == "z":
        logits = c["logits"].clone().requires_grad_()
        loss = m.router_z_loss(logits)
        loss.backward()
        return {"loss": loss.detach(), "grad": logits.grad}
    if kind == "capacity":
        return [m.expert_capacity(*args) for args in c["args"]]
    if kind == "mask":
        return [m.capacity_mask(e, n, cap) for e, n, cap in c["args"]]
    if kind == "invalid":
        return _run_invalid(m, c["what"])
    raise ValueError(kind)


def _raises_value_error(fn) -> str:
    try:
        fn()
    except ValueError:
        return "ValueError"
    return "no error"


def _run_invalid(m, what: str) -> dict[str, str]:
    logits = torch.zeros(3, 4, dtype=DTYPE)
    if what == "route":
        return {"k=0": _raises_value_error(lambda: m.route(logits, 0)),
                "k=E+1": _raises_value_error(lambda: m.route(logits, 5)),
                "1-D logits": _raises_value_error(lambda: m.route(logits[0], 1)),
                "accepted: k=E": _raises_value_error(lambda: m.route(logits, 4))}
    if what == "capacity":
        return {"capacity_factor=0": _raises_value_error(
                    lambda: m.expert_capacity(8, 4, 1, 0.0)),
                "capacity_factor<0": _raises_value_error(
                    lambda: m.expert_capacity(8, 4, 1, -1.0)),
                "num_experts=0": _raises_value_error(lambda: m.expert_capacity(8, 0, 1, 1.0)),
                "k=0": _raises_value_error(lambda: m.expert_capacity(8, 4, 0, 1.0)),
                "num_tokens=-1": _raises_value_error(lambda: m.expert_capacity(-1, 4, 1, 1.0))}
    if what == "all_to_all":
        x = torch.zeros(3, 2, dtype=DTYPE)
        return {"one split too few": _raises_value_error(
                    lambda: m.all_to_all_tokens(x, [3], [3])),
                "splits do not add up to x's rows": _raises_value_error(
                    lambda: m.all_to_all_tokens(x, [1, 1], [1, 1])),
                "one recv split too few": _raises_value_error(
                    lambda: m.all_to_all_tokens(x, [1, 2], [3]))}
    if what == "layer":
        router, wg = torch.zeros(3, 4, dtype=DTYPE), torch.zeros(3, 5, 4, dtype=DTYPE)
        wd = torch.zeros(3, 4, 5, dtype=DTYPE)
        router8, wg8 = torch.zeros(8, 4, dtype=DTYPE), torch.zeros(8, 5, 4, dtype=DTYPE)
        wd8 = torch.zeros(8, 4, 5, dtype=DTYPE)
        return {"E=3 on 2 ranks": _raises_value_error(
                    lambda: m.MoELayer.from_dense(router, wg, wg, wd, k=1)),
                "k=0": _raises_value_error(lambda: m.MoELayer(4, 5, 8, k=0)),
                "accepted: k=E": _raises_value_error(lambda: m.MoELayer(4, 5, 8, k=8)),
                "w_down of the wrong shape": _raises_value_error(
                    lambda: m.MoELayer.from_dense(router8, wg8, wg8, wd8[:, :, :3], k=1))}
    raise ValueError(what)


def _run_fresh(ctx, m, name: str, c: dict) -> dict:
    """A randomly initialised layer (defaults), and a from_dense one whose arguments are then
    overwritten in place: its parameters must not change (copies, not views)."""
    layer = m.MoELayer(c["hidden"], c["ffn"], c["experts"])
    params = {"router": layer.router.weight, "w_gate": layer.w_gate, "w_up": layer.w_up,
              "w_down": layer.w_down}
    fresh = {"k": layer.k, "capacity_factor": layer.capacity_factor,
             "shapes": {n: list(p.shape) for n, p in params.items()},
             "dtypes": {n: str(p.dtype) for n, p in params.items()},
             "max_abs": {n: float(p.detach().abs().max()) for n, p in params.items()}}
    dense = {n: t.clone() for n, t in c["dense"].items()}
    built = m.MoELayer.from_dense(dense["router"], dense["w_gate"], dense["w_up"],
                                  dense["w_down"])
    for t in dense.values():
        t.fill_(7.0)
    return {"fresh": fresh, "from_dense_k": built.k,
            "after": {"router": built.router.weight.detach(), "w_gate": built.w_gate.detach(),
                      "w_up": built.w_up.detach(), "w_down": built.w_down.detach()}}


def rank_all(ctx, cases: dict[str, dict]) -> dict:
    """Every case of this launch, each in its own error scope (same order on every rank)."""
    m_box: dict[str, Any] = {}

    def module():
        if "m" not in m_box:
            m_box["m"] = ctx.impl_module("moe", "moe")
        return m_box["m"]

    handlers = {"layer": _run_layer, "a2a": _run_a2a, "fresh": _run_fresh}
    parts = []
    for name, c in cases.items():
        handler = handlers.get(c["kind"], _run_unit)
        parts.append((name, lambda n=name, c=c, h=handler: h(ctx, module(), n, c)))
    return run_cases(ctx, parts)
