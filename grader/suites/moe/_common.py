"""Shared pieces of the moe hidden suite: the cases, their dense references, the one launch per
world size that runs them all, and the messages.

Parent side: every case is built here from fixed seeds with plain torch, and so is its expected
value: a dense, single-process mixture of experts (every expert local, the same weights) run on
each rank's tokens, with the documented capacity and drop order written as plain loops. Rank
side: `rank_all` runs every case of a world size in one launch, each in its own error scope
(`harness.cases.run_cases`), so a stubbed or broken function costs only the tests that read its
cases. The parent reads a case with `case_values`; `Memo` keeps one launch per (impl, world size)
for every module of the suite.

The launches use the sidecar transport: the all-to-alls the tests count and size are what the
sidecars carried (`wire_windows`, the wire cut by the rank's marks, which only label), never the
rank's own log, which code under test could go around.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F

from grader.compare import assert_close
from grader.suites.moe import _units
from grader.suites.moe._ref import DTYPE, dense_keep, dense_route, randn
from harness import CommRecord
from harness.cases import Memo, case_values, run_cases
from harness.commlog import as_log, windows

BACKEND = "gloo"  # CPU tensors everywhere: gloo even where a GPU would let "auto" pick NCCL
TRANSPORT = "sidecar"  # the traffic the tests judge is carried and logged outside the rank
TIMEOUT_S = 90.0
# Every distributed case runs on its own group of all ranks with this collective timeout: a rank
# that leaves out a collective (say, the backward of a rank whose experts got no token) then
# fails that case after this long, on the ranks left waiting, instead of hanging the launch.
CASE_GROUP_TIMEOUT_S = 15.0
HIDDEN, FFN, EXPERTS = 6, 10, 8
WORLDS = (2, 4)
NOT_COMMUNICATION = frozenset({"mark"})
INTEGER_DTYPES = frozenset({"torch.int64", "torch.int32"})


# ---- parent: the dense references (the single-process ones live in _ref.py) --------------

def capacity_of(tokens: int, k: int, cf: float | None) -> int | None:
    return None if cf is None else math.ceil(k * tokens * cf / EXPERTS)


def swiglu(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, wd: torch.Tensor) -> torch.Tensor:
    return (F.silu(h @ wg.t()) * (h @ wu.t())) @ wd.t()


def dense_moe(x: torch.Tensor, params: dict[str, torch.Tensor], k: int, cf: float | None,
              variant: str = "") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One rank's tokens through the dense MoE: (y, logits, keep). `variant` computes a known
    wrong version for diagnostics: "no_weights", "renormalise_kept", "no_drop", "token_major"."""
    logits = x @ params["router"].t()
    routed = dense_route(logits, k)
    experts, weights = routed["experts"], routed["weights"]
    capacity = None if variant == "no_drop" else capacity_of(x.shape[0], k, cf)
    keep = dense_keep(experts, EXPERTS, capacity, token_major=variant == "token_major")
    if variant == "no_weights":
        weights = torch.ones_like(weights)
    if variant == "renormalise_kept":
        kept = weights * keep
        weights = kept / kept.sum(-1, keepdim=True).clamp_min(1e-300)
    rows = []
    for t in range(x.shape[0]):
        row = x.new_zeros(x.shape[1])
        for j in range(k):
            if keep[t, j]:
                e = int(experts[t, j])
                row = row + weights[t, j] * swiglu(x[t], params["w_gate"][e], params["w_up"][e],
                                                   params["w_down"][e])
        rows.append(row)
    return torch.stack(rows), logits, keep


def layer_reference(params: dict[str, torch.Tensor], xs: list[torch.Tensor],
                    grads: list[torch.Tensor], k: int, cf: float | None) -> dict[str, Any]:
    """Every rank's y, logits, input and router gradients (its own tokens only), the expert
    gradients summed over every rank's tokens, and each rank's kept assignments."""
    experts_p = {name: params[name].clone().requires_grad_()
                 for name in ("w_gate", "w_up", "w_down")}
    per_rank = []
    for x, g in zip(xs, grads):
        router = params["router"].clone().requires_grad_()
        leaf = x.clone().requires_grad_()
        y, logits, keep = dense_moe(leaf, {"router": router, **experts_p}, k, cf)
        y.backward(g)
        per_rank.append({"y": y.detach(), "logits": logits.detach(), "x_grad": leaf.grad,
                         "router_grad": router.grad, "keep": keep,
                         "experts": dense_route(logits.detach(), k)["experts"]})
    return {"ranks": per_rank, **{f"{n}_grad": p.grad for n, p in experts_p.items()}}


def diagnose(x: torch.Tensor, params: dict[str, torch.Tensor], k: int, cf: float | None,
             got: torch.Tensor) -> str:
    """Which known wrong version (a `dense_moe` variant) `got` equals, if any, among those this
    case tells apart from the right answer; "" if none."""
    right = dense_moe(x, params, k, cf)[0]
    for variant in ("no_weights", "renormalise_kept", "no_drop", "token_major"):
        alt = dense_moe(x, params, k, cf, variant)[0]
        if torch.allclose(alt, right, atol=1e-9, rtol=1e-9):
            continue  # this case cannot tell the variant from the right answer
        if got.shape == alt.shape and torch.allclose(got.to(DTYPE), alt, atol=1e-9, rtol=1e-9):
            return variant
    return ""


def traffic_bounds(reference: dict[str, Any], world: int) -> list[dict[str, tuple[int, int]]]:
    """Per rank, the elements the dispatch all-to-all may send and receive: between the rows
    that must leave (distinct (token, other rank) pairs) and every kept assignment, times H."""
    local = EXPERTS // world
    sent = [[[] for _ in range(world)] for _ in range(world)]  # [src][dst] -> token ids, per slot
    for src, rank_ref in enumerate(reference["ranks"]):
        experts, keep = rank_ref["experts"], rank_ref["keep"]
        for t in range(experts.shape[0]):
            for j in range(experts.shape[1]):
                if keep[t, j]:
                    sent[src][int(experts[t, j]) // local].append(t)
    out = []
    for r in range(world):
        send_hi = sum(len(sent[r][d]) for d in range(world))
        send_lo = sum(len(set(sent[r][d])) for d in range(world) if d != r)
        recv_hi = sum(len(sent[s][r]) for s in range(world))
        recv_lo = sum(len(set(sent[s][r])) for s in range(world) if s != r)
        out.append({"send": (send_lo * HIDDEN, send_hi * HIDDEN),
                    "recv": (recv_lo * HIDDEN, recv_hi * HIDDEN)})
    return out


# ---- parent: the cases ------------------------------------------------------------------------

def dense_params(seed: int, empty_rank: int | None = None, world: int = 2) -> dict[str, Any]:
    params = {"router": randn(seed, EXPERTS, HIDDEN),
              "w_gate": randn(seed + 1, EXPERTS, FFN, HIDDEN, scale=0.4),
              "w_up": randn(seed + 2, EXPERTS, FFN, HIDDEN, scale=0.4),
              "w_down": randn(seed + 3, EXPERTS, HIDDEN, FFN, scale=0.3)}
    if empty_rank is not None:
        # Input feature 0 is 1 for every token; experts of `empty_rank` get a logit ~ -40.
        local = EXPERTS // world
        params["router"][empty_rank * local:(empty_rank + 1) * local, 0] = -40.0
    return params


def tokens(seed: int, world: int, constant_feature: bool) -> list[torch.Tensor]:
    xs = [randn(seed + 10 + r, 9 + r, HIDDEN) for r in range(world)]  # T differs by rank
    if constant_feature:
        for x in xs:
            x[:, 0] = 1.0
    return xs


def separated(logits: torch.Tensor, k: int) -> bool:
    """No near-tie at the k-th choice (the contract leaves tie-breaking open)."""
    top = torch.topk(logits, min(k + 1, logits.shape[1]), dim=-1).values
    return bool((top[:, :-1] - top[:, 1:] > 1e-6).all())


def layer_case(world: int, k: int, cf: float | None, seed: int,
               empty_rank: int | None = None) -> dict[str, Any]:
    params = dense_params(seed, empty_rank, world)
    xs = tokens(seed, world, empty_rank is not None)
    grads = [randn(seed + 30 + r, x.shape[0], HIDDEN) for r, x in enumerate(xs)]
    reference = layer_reference(params, xs, grads, k, cf)
    for rank_ref in reference["ranks"]:
        assert separated(rank_ref["logits"], k), "a near-tie in the router: pick another seed"
    if cf is not None:
        assert any(not bool(rr["keep"].all()) for rr in reference["ranks"]), "nothing dropped"
    return {"kind": "layer", "world": world, "k": k, "cf": cf, "params": params, "xs": xs,
            "grads": grads, "expected": reference, "bounds": traffic_bounds(reference, world)}


def layer_name(k: int, cf: float | None, empty: bool = False) -> str:
    """The case's name, in test ids and messages (a declared label: never scrubbed)."""
    label = f"k={k}-capacity_factor={cf}" + ("-one_rank_receives_nothing" if empty else "")
    return label


LAYER_SPECS = {  # world -> [(k, cf, seed, empty rank)]
    2: [(1, None, 100, None), (2, None, 110, None), (1, 1.0, 120, None), (2, 1.0, 130, None)],
    4: [(1, None, 200, None), (2, None, 210, None), (1, 1.25, 220, None), (2, 1.0, 230, None),
        (2, None, 240, 3)],
}


def a2a_case(splits: list[list[int]], seed: int, trailing: tuple[int, ...] = (3,)
             ) -> dict[str, Any]:
    """splits[i][j]: rows rank i sends rank j. Expected outputs and input gradients."""
    world = len(splits)
    xs = [randn(seed + i, sum(splits[i]), *trailing) for i in range(world)]
    recv = [[splits[i][j] for i in range(world)] for j in range(world)]
    outs_grad = [randn(seed + 50 + j, sum(recv[j]), *trailing) for j in range(world)]

    def blocks(t: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
        return list(torch.split(t, sizes))

    x_blocks = [blocks(xs[i], splits[i]) for i in range(world)]
    g_blocks = [blocks(outs_grad[j], recv[j]) for j in range(world)]
    out = [torch.cat([x_blocks[i][j] for i in range(world)]) for j in range(world)]
    x_grad = [torch.cat([g_blocks[j][i] for j in range(world)]) for i in range(world)]
    return {"kind": "a2a", "splits": splits, "xs": xs, "out_grads": outs_grad,
            "expected": {"out": out, "x_grad": x_grad}}


A2A_SPECS = {  # world -> {name: (splits, seed, trailing shape of a row)}
    2: {"uneven": ([[2, 3], [1, 4]], 300, (3,)),
        "one_rank_sends_nothing": ([[0, 0], [2, 1]], 310, (2, 2))},
    # Every rank sends as many rows as it receives, yet the splits are not symmetric: a
    # backward that forgets to swap them runs without error and misroutes the gradient.
    4: {"equal_totals": ([[1, 2, 0, 0], [0, 1, 2, 0], [0, 0, 1, 2], [2, 0, 0, 1]], 320, (3,)),
        "uneven_with_empty_pairs": ([[0, 3, 1, 0], [2, 0, 0, 5], [1, 1, 1, 1], [0, 0, 4, 2]],
                                    330, (2, 2))},
}


# ---- rank side --------------------------------------------------------------------------------

def _case_group(ctx):
    """A group of every rank, this case's own, whose collectives time out (see above)."""
    from datetime import timedelta

    return ctx.new_group(list(range(ctx.world_size)),
                         timeout=timedelta(seconds=CASE_GROUP_TIMEOUT_S))


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


# ---- parent: the launches ---------------------------------------------------------------------

def unit_cases() -> dict[str, dict]:
    """The single-process functions' cases (run in the 2-rank launch, read from rank 0)."""
    return _units.cases()


_REFS: dict[int, dict[str, dict]] = {}


def cases_for(world: int) -> dict[str, dict]:
    if world not in _REFS:
        cases: dict[str, dict] = {}
        if world == 2:
            cases.update(unit_cases())
        for name, (splits, seed, trailing) in A2A_SPECS[world].items():
            cases[f"a2a {name}"] = a2a_case(splits, seed, trailing)
        for k, cf, seed, empty in LAYER_SPECS[world]:
            cases[f"layer {layer_name(k, cf, empty is not None)}"] = layer_case(
                world, k, cf, seed, empty)
        if world == 2:
            cases["layer fresh"] = {"kind": "fresh", "hidden": 16, "ffn": 64, "experts": 8,
                                    "dense": dense_params(140)}
            for what in ("route", "capacity", "all_to_all", "layer"):
                cases[f"invalid {what}"] = {"kind": "invalid", "what": what}
        _REFS[world] = cases
    return _REFS[world]


def _strip(case: dict) -> dict:
    """What travels to the ranks: the case without its expected values."""
    return {k: v for k, v in case.items() if k not in ("expected", "bounds")}


_RUNS = Memo(hang_timeout=20.0)


def run(launch, impl, world: int):
    """The launch of every case of `world` ranks, once per session and implementation."""
    def make():
        cases = {name: _strip(c) for name, c in cases_for(world).items()}
        # A rank left waiting in a case's collective is released by the case group's timeout
        # and fails only that case: the stall watch must not end the launch before it does.
        return launch(rank_all, world_size=world, args=(cases,), backend=BACKEND,
                      transport=TRANSPORT, timeout=_RUNS.timeout(TIMEOUT_S),
                      stall_after=CASE_GROUP_TIMEOUT_S + 10)

    return _RUNS.get((str(impl.text), world), make)


def wire_windows(result, rank: int) -> defaultdict[str, list[CommRecord]]:
    """What the sidecars carried for `rank`, as a log cut at its marks (label -> records); a
    phase in which nothing was carried is an empty window."""
    return defaultdict(list, windows(as_log(result.wire[rank])))


def values(result, name: str) -> list[Any]:
    return case_values(result.values, name)


def check(actual: Any, expected: torch.Tensor, what: str, hint: str = "") -> None:
    assert_close(actual, expected, what=what, hint=hint, hint_first=bool(hint))


def grad_or_zeros(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if t is None else t


def describe(records: list[CommRecord]) -> str:
    calls = [f"{r.op}({r.numel}{' ' + r.dtype.removeprefix('torch.') if r.dtype else ''})"
             for r in records if r.op not in NOT_COMMUNICATION]
    return ", ".join(calls) if calls else "no communication"
