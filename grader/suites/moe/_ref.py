"""The moe suite's references, computed in the parent with plain torch in float64: the
documented routing and drop order, a dense single-process mixture of experts (every expert
local, the same weights) run on each rank's tokens, the load-balancing loss, the bounds of the
dispatch traffic, and the comparisons the tests make against them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.moe._ranks import DTYPE
from harness import CommRecord

HIDDEN, FFN, EXPERTS = 6, 10, 8
NOT_COMMUNICATION = frozenset({"mark"})
INTEGER_DTYPES = frozenset({"torch.int64", "torch.int32"})


def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=DTYPE) * scale


def dense_route(logits: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """Softmax over all experts, top-k, renormalised over the k (the documented routing)."""
    probs = torch.softmax(logits, dim=-1)
    top, experts = torch.topk(probs, k, dim=-1)
    return {"probs": probs, "experts": experts, "weights": top / top.sum(-1, keepdim=True)}


def dense_keep(experts: torch.Tensor, num_experts: int, capacity: int | None,
               token_major: bool = False) -> torch.Tensor:
    """The documented drop order as a loop: choice column by choice column, tokens in order;
    `token_major` walks token by token instead (a wrong order, for diagnostics)."""
    tokens, k = experts.shape
    keep = torch.ones(tokens, k, dtype=torch.bool)
    if capacity is None:
        return keep
    used = [0] * num_experts
    order = ([(t, j) for t in range(tokens) for j in range(k)] if token_major else
             [(t, j) for j in range(k) for t in range(tokens)])
    for t, j in order:
        e = int(experts[t, j])
        keep[t, j] = used[e] < capacity
        used[e] += 1
    return keep


def separated(logits: torch.Tensor, k: int) -> bool:
    """No near-tie at the k-th choice (the contract leaves tie-breaking open)."""
    top = torch.topk(logits, min(k + 1, logits.shape[1]), dim=-1).values
    return bool((top[:, :-1] - top[:, 1:] > 1e-6).all())


# ---- the dense layer ------------------------------------------------------------------------

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
    # [src][dst] -> token ids, one per kept slot
    sent: list[list[list[int]]] = [[[] for _ in range(world)] for _ in range(world)]
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


def dense_lb(logits: torch.Tensor, experts: torch.Tensor) -> dict[str, torch.Tensor | None]:
    """The load-balancing loss E * sum_i f_i * P_i and its gradient, and two wrong values
    for diagnostics: f_i from the probabilities, and the loss without the factor E."""
    leaf = logits.clone().requires_grad_()
    probs = torch.softmax(leaf, -1)
    num_experts = probs.shape[1]
    f = torch.bincount(experts.reshape(-1), minlength=num_experts).to(DTYPE) / experts.numel()
    loss = num_experts * (f * probs.mean(0)).sum()
    loss.backward()
    # The wrong one, for a diagnostic: f_i taken from the probabilities (E * sum P_i^2).
    p = torch.softmax(logits, -1).mean(0)
    return {"loss": loss.detach(), "grad": leaf.grad,
            "f_from_probs": num_experts * (p * p).sum(), "no_E": loss.detach() / num_experts}


# ---- comparisons ------------------------------------------------------------------------------

def check(actual: Any, expected: torch.Tensor, what: str, hint: str = "") -> None:
    assert_close(actual, expected, what=what, hint=hint, hint_first=bool(hint))


def grad_or_zeros(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if t is None else t


def describe(records: list[CommRecord]) -> str:
    calls = [f"{r.op}({r.numel}{' ' + r.dtype.removeprefix('torch.') if r.dtype else ''})"
             for r in records if r.op not in NOT_COMMUNICATION]
    return ", ".join(calls) if calls else "no communication"
