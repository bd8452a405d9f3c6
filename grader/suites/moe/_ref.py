"""The moe suite's single-process references, computed in the parent with plain torch in
float64: the documented routing and drop order, and the seeded inputs they are applied to.
`_units` (the unit cases) and `_common` (the layer cases) both build on them.
"""

from __future__ import annotations

import torch

from grader.seeds import seeded_generator

DTYPE = torch.float64


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
