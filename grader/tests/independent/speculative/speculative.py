"""An independent speculative.py, written from the stub's docstrings and the README only.

Differs from the reference on purpose: the acceptance test is vectorised over the k drafts
(one uniform per draft, drawn up front), sampling goes through torch.multinomial, and the
generation loop keeps the last emitted token "pending" outside both caches.
"""

from __future__ import annotations

import torch

from assignments.speculative.lm import CausalLM, next_token_probs


def _pick(weights: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(weights.double(), 1, generator=gen).item())


def rejection_sample(draft_probs: torch.Tensor, target_probs: torch.Tensor,
                     draft_tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    k = int(draft_tokens.numel())
    toks = draft_tokens.reshape(-1).long()
    rows = torch.arange(k)
    p_x = target_probs[:k].double()[rows, toks]
    q_x = draft_probs.double()[rows, toks]
    u = torch.rand(k, generator=generator, dtype=torch.float64)
    ok = u * q_x < p_x
    bad = (~ok).nonzero()
    if len(bad) == 0:
        tail = _pick(target_probs[k], generator)
        return torch.cat([toks, torch.tensor([tail])])
    j = int(bad[0])
    diff = (target_probs[j].double() - draft_probs[j].double()).clamp_min(0.0)
    tail = _pick(diff if float(diff.sum()) > 0 else target_probs[j], generator)
    return torch.cat([toks[:j], torch.tensor([tail])])


def acceptance_rate(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    both = torch.stack([draft_probs.double(), target_probs.double()])
    return both.min(dim=0).values.sum(-1)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    if k < 0 or alpha < 0 or alpha > 1:
        raise ValueError("need 0 <= alpha <= 1 and k >= 0")
    total, term = 0.0, 1.0
    for _ in range(k + 1):
        total += term
        term *= alpha
    return total


def speculative_generate(target: CausalLM, draft: CausalLM, prompt: torch.Tensor, k: int,
                         max_new_tokens: int, temperature: float, generator: torch.Generator
                         ) -> tuple[torch.Tensor, dict[str, int]]:
    prompt = torch.as_tensor(prompt).long().flatten()
    if k < 0 or max_new_tokens < 0 or prompt.numel() < 1 or \
            draft.vocab_size != target.vocab_size:
        raise ValueError("bad arguments to speculative_generate")
    target.reset()
    draft.reset()
    history = prompt.tolist()[:-1]  # tokens both models should have cached
    pending = int(prompt[-1])       # fed at the start of the next round
    made: list[int] = []
    st = dict(rounds=0, drafted=0, accepted=0, rejected=0)
    while len(made) < max_new_tokens:
        kk = min(k, max_new_tokens - len(made) - 1)
        guesses: list[int] = []
        qs = []
        for _ in range(kk):
            context = history + [pending] + guesses
            out = draft.forward(torch.tensor(context[draft.cache_len:]))
            dist = next_token_probs(out[-1], temperature)
            qs.append(dist)
            guesses.append(_pick(dist, generator))
        base = target.cache_len
        logits = target.forward(torch.tensor(history[base:] + [pending] + guesses))
        ps = next_token_probs(logits[logits.shape[0] - kk - 1:], temperature)
        q = torch.stack(qs) if qs else torch.empty(0, target.vocab_size, dtype=torch.float64)
        got = rejection_sample(q, ps, torch.tensor(guesses, dtype=torch.long), generator)
        got_list = [int(t) for t in got]
        n = len(got_list) - 1
        history = history + [pending] + got_list[:-1]
        pending = got_list[-1]
        made.extend(got_list)
        target.rollback(len(history))
        if draft.cache_len > len(history):
            draft.rollback(len(history))
        st["rounds"] += 1
        st["drafted"] += kk
        st["accepted"] += n
        if n < kk:
            st["rejected"] += 1
    return torch.tensor(made, dtype=torch.long), st
