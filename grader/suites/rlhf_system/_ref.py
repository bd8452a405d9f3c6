"""References for the rlhf_system suite, computed in the parent with plain torch (float64).

Nothing here imports the code under test. The toy models' forward is rewritten from their
documented layout (embedding of token and position, one residual ReLU MLP, a head, logit_bias),
so a reference never runs the module a submission was handed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import cast

import torch

F64 = torch.float64


def _trunk(state: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    w = {k: v.to(F64) for k, v in state.items() if v.is_floating_point()}
    h = w["tok.weight"][tokens] + w["pos.weight"][torch.arange(tokens.shape[1])][None]
    mid = torch.relu(h @ w["fc1.weight"].T + w["fc1.bias"])
    return h + mid @ w["fc2.weight"].T + w["fc2.bias"]


def policy_logits(state: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """TinyPolicy's logits [B, L, vocab] in float64 from its state dict."""
    h = _trunk(state, tokens)
    return h @ state["head.weight"].to(F64).T + state["head.bias"].to(F64) \
        + state["logit_bias"].to(F64)


def critic_values(state: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """TinyCritic's values [B, L] in float64 from its state dict."""
    h = _trunk(state, tokens)
    return (h @ state["value.weight"].to(F64).T + state["value.bias"].to(F64))[..., 0]


def inputs_of(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    # the prompt in column 0, then every response token but the last
    shifted = responses.roll(1, dims=1)
    shifted[:, 0] = prompts
    return shifted


def response_logprobs(state: Mapping[str, torch.Tensor], prompts: torch.Tensor,
                      responses: torch.Tensor) -> torch.Tensor:
    """log pi(response token t | prompt, earlier tokens), [B, T] float64."""
    logits = policy_logits(state, inputs_of(prompts, responses))
    return torch.log_softmax(logits, -1).gather(2, responses[..., None])[..., 0]


def reward(prompts: torch.Tensor, responses: torch.Tensor, vocab: int) -> torch.Tensor:
    """The count-up score: fraction of positions t holding (prompt + t + 1) % vocab."""
    hits = [(responses[:, t] == (prompts + t + 1) % vocab).to(F64)
            for t in range(responses.shape[1])]
    return torch.stack(hits, 1).mean(1)


def kl_rewards(logprobs: torch.Tensor, ref: torch.Tensor, scores: torch.Tensor,
               mask: torch.Tensor, beta: float) -> torch.Tensor:
    out = torch.zeros(logprobs.shape, dtype=F64)
    for b in range(logprobs.shape[0]):
        n = int(mask[b].sum())
        for t in range(n):
            out[b, t] = -beta * (float(logprobs[b, t]) - float(ref[b, t]))
        out[b, n - 1] += float(scores[b])
    return out


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    adv = torch.zeros(rewards.shape, dtype=F64)
    ret = torch.zeros(rewards.shape, dtype=F64)
    for b in range(rewards.shape[0]):
        n = int(mask[b].sum())
        running = 0.0
        for t in reversed(range(n)):
            v_next = float(values[b, t + 1]) if t + 1 < n else 0.0
            delta = float(rewards[b, t]) + gamma * v_next - float(values[b, t])
            running = delta + gamma * lam * running
            adv[b, t] = running
            ret[b, t] = running + float(values[b, t])
    return adv, ret


def grpo(scores: torch.Tensor, group: int, eps: float, unbiased: bool = True) -> torch.Tensor:
    out = torch.zeros(scores.shape[0], dtype=F64)
    for start in range(0, scores.shape[0], group):
        g = [float(s) for s in scores[start:start + group]]
        mean = sum(g) / group
        var = sum((x - mean) ** 2 for x in g) / (group - 1 if unbiased else group)
        for i, x in enumerate(g):
            out[start + i] = (x - mean) / (var ** 0.5 + eps)
    return out


def entry_bytes(shape: Sequence[int], dtype: str) -> int:
    numel = 1
    for d in shape:
        numel *= int(d)
    return numel * torch.empty((), dtype=getattr(torch, dtype.split(".")[-1])).element_size()


def buckets(manifest: Sequence[tuple[str, tuple[int, ...], str]], limit: int) -> list[list[int]]:
    """The greedy plan of the contract, written independently (None entries: too large)."""
    out: list[list[int]] = []
    used = 0
    for i, (_, shape, dtype) in enumerate(manifest):
        size = entry_bytes(shape, dtype)
        if out and used + size <= limit:
            out[-1].append(i)
            used += size
        else:
            out.append([i])
            used = size
    return out


def tp_slice(name: str, full: torch.Tensor, tp_rank: int, tp_size: int,
             plan: Mapping[str, str]) -> torch.Tensor:
    kind = plan.get(name)
    if kind is None:
        return full.clone()
    dim = 0 if kind == "column" else 1
    step = full.shape[dim] // tp_size
    return full.narrow(dim, tp_rank * step, step).clone()


def expected_score(state: Mapping[str, torch.Tensor], vocab: int, response_len: int) -> float:
    """The exact expected score of the policy over uniform prompts and all responses."""
    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=response_len)))
    total = 0.0
    for p in range(vocab):
        prompts = torch.full((seqs.shape[0],), p)
        lp = response_logprobs(state, prompts, seqs).sum(1)
        total += float((lp.exp() * reward(prompts, seqs, vocab)).sum())
    return total / vocab


def ppo_steps(actor_state: Mapping[str, torch.Tensor], critic_state: Mapping[str, torch.Tensor],
              exp: Mapping[str, torch.Tensor], cfg_kwargs: Mapping[str, object]
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """cfg.ppo_epochs full-batch Adam steps of the documented update, in float32 as the rank
    computes them (the provided models and losses, torch's Adam); the critic only for "gae"."""
    from assignments.rlhf_system import toy

    cfg = toy.RLHFConfig(**cfg_kwargs)  # type: ignore[arg-type]
    vocab, hidden = actor_state["tok.weight"].shape
    actor, critic = toy.TinyPolicy(vocab, hidden), toy.TinyCritic(vocab, hidden)
    actor.load_state_dict(actor_state)
    critic.load_state_dict(critic_state)
    a_opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
    c_opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    tokens = inputs_of(exp["prompts"], exp["responses"])
    for _ in range(cfg.ppo_epochs):
        a_opt.zero_grad()
        logits = actor(tokens).float()
        logp = torch.log_softmax(logits, -1).gather(2, exp["responses"][..., None])[..., 0]
        toy.ppo_policy_loss(logp, exp["old_logprobs"], exp["advantages"], exp["mask"],
                            cfg.clip).backward()
        a_opt.step()
        if cfg.advantage == "gae":
            c_opt.zero_grad()
            toy.value_loss(critic(tokens), exp["returns"], exp["mask"]).backward()
            c_opt.step()
    with torch.no_grad():
        cast(torch.Tensor, actor.num_updates).add_(1)  # a buffer (toy.TinyPolicy)
    return ({k: v.detach().clone() for k, v in actor.state_dict().items()},
            {k: v.detach().clone() for k, v in critic.state_dict().items()})
