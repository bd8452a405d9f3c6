"""Speculative decoding that keeps the target's distribution (README §4-§5).

Independent implementation: every categorical draw inverts a CDF with one uniform from the
caller's generator; acceptance is tested as ``u * q(x) < p(x)`` (no division).
"""

from __future__ import annotations

import math

import torch

from assignments.speculative.lm import CausalLM, next_token_probs

_F64 = torch.float64


def _inverse_cdf(weights: torch.Tensor, generator: torch.Generator) -> int:
    """One index drawn proportionally to the non-negative 1-D `weights` (not normalised)."""
    w = weights.to(_F64).reshape(-1)
    cdf = torch.cumsum(w, dim=0)
    total = float(cdf[-1])
    if not total > 0.0 or not math.isfinite(total):
        raise ValueError("cannot sample from a distribution with no positive mass")
    u = torch.rand((), generator=generator, dtype=_F64) * total
    pick = int(torch.searchsorted(cdf, u.reshape(1), right=True)[0])
    if pick >= w.numel():  # u rounded onto the total: take the last token with mass
        pick = int(torch.nonzero(w > 0)[-1, 0])
    return pick


def _uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, dtype=_F64))


def rejection_sample(draft_probs: torch.Tensor, target_probs: torch.Tensor,
                     draft_tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Verify k draft tokens against the target; returns the n + 1 emitted tokens (README §4)."""
    tokens = torch.as_tensor(draft_tokens).reshape(-1).to(torch.long).tolist()
    k = len(tokens)
    p_rows = torch.as_tensor(target_probs, dtype=_F64)
    if p_rows.dim() == 1:
        p_rows = p_rows.unsqueeze(0)
    if p_rows.dim() != 2 or p_rows.shape[0] < k + 1:
        raise ValueError(f"target_probs must be [k + 1, V] = [{k + 1}, V], got "
                         f"{tuple(p_rows.shape)}")
    q_rows = torch.as_tensor(draft_probs, dtype=_F64)
    if k:
        if q_rows.dim() == 1:
            q_rows = q_rows.unsqueeze(0)
        if q_rows.dim() != 2 or q_rows.shape[0] < k or q_rows.shape[1] != p_rows.shape[1]:
            raise ValueError(f"draft_probs must be [k, V] = [{k}, {p_rows.shape[1]}], got "
                             f"{tuple(q_rows.shape)}")

    emitted: list[int] = []
    for i, x in enumerate(tokens):
        p_x = float(p_rows[i, x])
        q_x = float(q_rows[i, x])
        if _uniform(generator) * q_x < p_x:  # probability min(1, p/q)
            emitted.append(x)
            continue
        leftover = torch.clamp(p_rows[i] - q_rows[i], min=0.0)
        if not float(leftover.sum()) > 0.0:
            leftover = p_rows[i]
        emitted.append(_inverse_cdf(leftover, generator))
        return torch.tensor(emitted, dtype=torch.long)
    emitted.append(_inverse_cdf(p_rows[k], generator))  # the bonus token
    return torch.tensor(emitted, dtype=torch.long)


def acceptance_rate(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """alpha = sum_x min(p(x), q(x)) along the last dimension, float64 (README §5)."""
    q = torch.as_tensor(draft_probs).to(_F64)
    p = torch.as_tensor(target_probs).to(_F64)
    if q.shape != p.shape:
        raise ValueError(f"draft_probs {tuple(q.shape)} and target_probs {tuple(p.shape)} "
                         f"must have the same shape")
    return torch.where(p < q, p, q).sum(dim=-1)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k; k + 1 at alpha = 1 (README §5)."""
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if isinstance(k, bool) or int(k) != k or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k}")
    k = int(k)
    if a == 1.0:
        return float(k + 1)
    if k <= 4096:
        acc = 1.0  # Horner: 1 + a(1 + a(1 + ...)), no cancellation near alpha = 1
        for _ in range(k):
            acc = 1.0 + a * acc
        return acc
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def speculative_generate(target: CausalLM, draft: CausalLM, prompt: torch.Tensor, k: int,
                         max_new_tokens: int, temperature: float, generator: torch.Generator
                         ) -> tuple[torch.Tensor, dict[str, int]]:
    """Draft-and-verify rounds until max_new_tokens tokens are emitted (README §5)."""
    if isinstance(k, bool) or int(k) != k or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k}")
    if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    context = torch.as_tensor(prompt).reshape(-1).to(torch.long).tolist()
    if not context:
        raise ValueError("the prompt must hold at least one token")
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target vocab {target.vocab_size} != draft vocab {draft.vocab_size}")
    k, budget = int(k), int(max_new_tokens)

    target.reset()
    draft.reset()
    stats = {"rounds": 0, "drafted": 0, "accepted": 0, "rejected": 0}
    start = len(context)

    while len(context) - start < budget:
        remaining = budget - (len(context) - start)
        width = min(k, remaining - 1)
        base = len(context)

        # 1. the draft proposes `width` tokens, one forward each, catching up on what it lacks
        proposals: list[int] = []
        q_rows: list[torch.Tensor] = []
        for _ in range(width):
            fed = draft.cache_len
            unseen = proposals[fed - base:] if fed >= base else context[fed:] + proposals
            logits = draft.forward(torch.tensor(unseen, dtype=torch.long))
            q = next_token_probs(logits[-1], temperature)
            q_rows.append(q)
            proposals.append(_inverse_cdf(q, generator))

        # 2. one target forward over what it has not seen plus the proposals
        seen = target.cache_len
        fresh = context[seen:] + proposals
        p_all = next_token_probs(target.forward(torch.tensor(fresh, dtype=torch.long)),
                                 temperature)
        p_rows = p_all[-(width + 1):]

        # 3. verify
        q_mat = torch.stack(q_rows) if q_rows else torch.empty(0, p_rows.shape[1], dtype=_F64)
        out = rejection_sample(q_mat, p_rows, torch.tensor(proposals, dtype=torch.long),
                               generator).tolist()
        kept = len(out) - 1
        context.extend(out)

        stats["rounds"] += 1
        stats["drafted"] += width
        stats["accepted"] += kept
        stats["rejected"] += int(kept < width)

        # 4. keep only the accepted prefix in both caches (the new token is not fed yet)
        valid = base + kept
        if target.cache_len > valid:
            target.rollback(valid)
        if draft.cache_len > valid:
            draft.rollback(valid)

    return torch.tensor(context[start:], dtype=torch.long), stats
