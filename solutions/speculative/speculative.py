"""Speculative decoding that keeps the target's distribution: the worked solution.

The algorithm is speculative sampling (Leviathan, Kalman and Matias 2023, "Fast Inference from
Transformers via Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model
Decoding with Speculative Sampling"), as vLLM's rejection sampler and SGLang's speculative
workers run it: draft k tokens, score them with one target forward, keep a prefix.
"""

from __future__ import annotations

import torch

from assignments.speculative.lm import CausalLM, next_token_probs

_F64 = torch.float64


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a normalised distribution by inverting its CDF with a uniform draw."""
    u = torch.rand((), generator=generator, dtype=_F64)
    cdf = torch.cumsum(probs.to(_F64), dim=0)
    # The last entry of the CDF may round to just under 1: clamp to the last index.
    return min(int(torch.searchsorted(cdf, u, right=True)), probs.numel() - 1)


def rejection_sample(draft_probs: torch.Tensor, target_probs: torch.Tensor,
                     draft_tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Verify k draft tokens against the target; returns the emitted tokens (README §4)."""
    k = draft_tokens.numel()
    out: list[int] = []
    for i in range(k):
        token = int(draft_tokens[i])
        p, q = float(target_probs[i, token]), float(draft_probs[i, token])
        # Accept with probability min(1, p/q): u < p/q, written without the division.
        u = float(torch.rand((), generator=generator, dtype=_F64))
        if u * q < p:
            out.append(token)
            continue
        # Rejected: the mass the draft over-proposed is removed; what the target still owes
        # is max(0, p - q), which must be normalised before drawing from it.
        residual = torch.clamp(target_probs[i].to(_F64) - draft_probs[i].to(_F64), min=0.0)
        total = float(residual.sum())
        residual = residual / total if total > 0 else target_probs[i].to(_F64)
        out.append(_draw(residual, generator))
        return torch.tensor(out, dtype=torch.long)
    # Every draft accepted: the target's row after the last draft gives one token for free.
    out.append(_draw(target_probs[k].to(_F64), generator))
    return torch.tensor(out, dtype=torch.long)


def acceptance_rate(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """alpha = sum_x min(p(x), q(x)) along the last dimension (README §5)."""
    return torch.minimum(draft_probs.to(_F64), target_probs.to(_F64)).sum(dim=-1)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k, the geometric series in closed form (README §5)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def speculative_generate(target: CausalLM, draft: CausalLM, prompt: torch.Tensor, k: int,
                         max_new_tokens: int, temperature: float, generator: torch.Generator
                         ) -> tuple[torch.Tensor, dict[str, int]]:
    """Generate max_new_tokens tokens after `prompt` with draft-and-verify rounds (README §5)."""
    prompt = torch.as_tensor(prompt).reshape(-1).to(torch.long)
    if k < 0 or max_new_tokens < 0:
        raise ValueError(f"k and max_new_tokens must be >= 0, got {k} and {max_new_tokens}")
    if prompt.numel() == 0:
        raise ValueError("the prompt needs at least one token")
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target and draft vocabularies differ: {target.vocab_size} and "
                         f"{draft.vocab_size}")
    target.reset()
    draft.reset()
    seq = prompt.tolist()
    start = len(seq)
    # `kept` tokens of seq are in both caches; the rest (the whole prompt at first, then the
    # last emitted token) are fed at the start of the next round.
    kept = 0
    draft_kept = 0  # the draft's share: it may lag behind `kept`
    stats = {"rounds": 0, "drafted": 0, "accepted": 0, "rejected": 0}
    while len(seq) - start < max_new_tokens:
        # Never draft past the end: the round emits at most k' + 1 tokens.
        k_round = min(k, max_new_tokens - (len(seq) - start) - 1)
        drafts: list[int] = []
        draft_rows: list[torch.Tensor] = []
        for _ in range(k_round):
            # The draft may lag behind seq (it skipped rounds with k' = 0, or its last draft
            # was accepted and never fed): feed it everything it has not seen.
            logits = draft.forward(torch.tensor((seq + drafts)[draft_kept:]))
            draft_kept = len(seq) + len(drafts)
            q = next_token_probs(logits[-1], temperature)
            draft_rows.append(q)
            drafts.append(int(torch.multinomial(q, 1, generator=generator)))
        # One target forward scores the unfed tail of seq and every draft: its last k' + 1
        # rows are the target's distributions after seq, seq + d_1, ..., seq + d_1..d_k'.
        logits = target.forward(torch.tensor(seq[kept:] + drafts))
        p = next_token_probs(logits[-(k_round + 1):], temperature)
        q_all = (torch.stack(draft_rows) if draft_rows
                 else torch.zeros(0, target.vocab_size, dtype=_F64))
        emitted = rejection_sample(q_all, p, torch.tensor(drafts, dtype=torch.long),
                                   generator).tolist()
        accepted = len(emitted) - 1
        seq += emitted
        # The caches may keep the accepted drafts but no rejected one. The last emitted token
        # was never fed, so both keep len(seq) - 1 positions (the draft fewer if it lags).
        kept = len(seq) - 1
        target.rollback(kept)
        draft_kept = min(draft_kept, kept)
        draft.rollback(draft_kept)
        stats["rounds"] += 1
        stats["drafted"] += k_round
        stats["accepted"] += accepted
        stats["rejected"] += int(accepted < k_round)
    return torch.tensor(seq[start:], dtype=torch.long), stats
