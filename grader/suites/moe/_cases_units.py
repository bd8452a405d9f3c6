"""The single-process functions' cases of the moe hidden suite (route, the two losses, capacity)
with their expected values, computed in the parent with plain torch (`_ref`). They run in the
2-rank launch of `_cases.run`.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.seeds import seeded_generator
from grader.suites.moe._ranks import DTYPE
from grader.suites.moe._ref import dense_keep, dense_lb, dense_route, randn, separated

ROUTE = {"k=1": (1, 400, 2.0), "k=2": (2, 410, 2.0), "k=3-large_logits": (3, 420, 50.0),
         "k=6-every_expert": (6, 425, 2.0)}
Z_LOSS = {"random_logits": (450, 3.0), "large_logits": (460, 1000.0)}
CAPACITY_ARGS = [(10, 4, 1, 1.0), (10, 4, 2, 1.25), (8, 4, 2, 1.0), (7, 8, 1, 1.5),
                 (0, 4, 1, 1.0), (16, 8, 2, 2.0), (3, 8, 2, 1.0), (9, 6, 2, 1.5),
                 (5, 1, 1, 1.0)]


def route_case(k: int, seed: int, scale: float) -> dict[str, Any]:
    logits = randn(seed, 7, 6, scale=scale)
    assert separated(logits, k), "a near-tie in the logits: pick another seed"
    w_grad, p_grad = randn(seed + 1, 7, k), randn(seed + 2, 7, 6)
    leaf = logits.clone().requires_grad_()
    out = dense_route(leaf, k)
    ((out["weights"] * w_grad).sum() + (out["probs"] * p_grad).sum()).backward()
    expected = {"weights": out["weights"].detach(), "experts": out["experts"],
                "probs": out["probs"].detach(), "grad": leaf.grad,
                "topk_softmax_probs": torch.zeros_like(out["probs"]).scatter(
                    1, out["experts"], out["weights"].detach()),
                "raw_weights": torch.gather(out["probs"].detach(), 1, out["experts"])}
    return {"kind": "route", "k": k, "logits": logits, "w_grad": w_grad, "p_grad": p_grad,
            "expected": expected}


def lb_case(logits: torch.Tensor, experts: torch.Tensor) -> dict[str, Any]:
    return {"kind": "lb", "logits": logits, "experts": experts,
            "expected": dense_lb(logits, experts)}


def z_case(seed: int, scale: float) -> dict[str, Any]:
    logits = randn(seed, 9, 5, scale=scale)
    leaf = logits.clone().requires_grad_()
    lse = torch.logsumexp(leaf, -1)
    loss = (lse * lse).mean()
    loss.backward()
    return {"kind": "z", "logits": logits,
            "expected": {"loss": loss.detach(), "grad": leaf.grad,
                         "no_square": lse.detach().mean(), "sum": (lse * lse).sum().detach()}}


def random_choices(seed: int, tokens: int, experts: int, k: int) -> torch.Tensor:
    """[tokens, k] distinct experts per row, uniformly drawn."""
    gen = seeded_generator(seed)
    return torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)])


def mask_args() -> list[tuple[torch.Tensor, int, int | None]]:
    # Hand-made: first choices pass before any second choice, so token order alone is wrong.
    a = torch.tensor([[0, 1], [0, 2], [1, 0]])
    b = torch.tensor([[1, 0], [1, 2], [0, 1], [2, 1]])
    r2 = random_choices(470, 12, 4, 2)
    r3 = random_choices(480, 10, 5, 3)
    return [(a, 3, 1), (b, 3, 1), (r2, 4, 2), (r2, 4, 3), (r3, 5, 4), (r2, 4, 0), (r3, 5, None)]


def cases() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, (k, seed, scale) in ROUTE.items():
        out[f"route {name}"] = route_case(k, seed, scale)
    uniform = torch.zeros(4, 4, dtype=DTYPE)
    out["load_balancing_loss perfect_balance"] = lb_case(uniform, torch.tensor([[0], [1], [2],
                                                                                [3]]))
    logits = randn(440, 10, 6, scale=1.5)
    out["load_balancing_loss k=2"] = lb_case(logits, dense_route(logits, 2)["experts"])
    skewed = randn(445, 8, 5)
    out["load_balancing_loss k=1-skewed"] = lb_case(skewed, torch.tensor([[0]] * 6 + [[3]] * 2))
    for name, (seed, scale) in Z_LOSS.items():
        out[f"router_z_loss {name}"] = z_case(seed, scale)
    out["expert_capacity"] = {"kind": "capacity", "args": CAPACITY_ARGS,
                              "expected": [_ceil(*a) for a in CAPACITY_ARGS]}
    args = mask_args()
    out["capacity_mask"] = {"kind": "mask", "args": args,
                            "expected": [dense_keep(e, n, c) for e, n, c in args],
                            "token_major": [dense_keep(e, n, c, True) for e, n, c in args]}
    return out


def _ceil(tokens: int, experts: int, k: int, cf: float) -> int:
    import math

    return math.ceil(k * tokens * cf / experts)
