"""One RLHF iteration's computation (independent implementation, from README §2–§4)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from assignments.rlhf_system.toy import (
    Experience,
    RLHFConfig,
    ppo_policy_loss,
    toy_reward,
    value_loss,
)


def _inputs(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    # response token t is predicted at position t of (prompt, r_0 .. r_{T-2})
    return torch.cat([prompts.unsqueeze(1), responses[:, :-1]], dim=1)


def generate(policy: nn.Module, prompts: torch.Tensor, response_len: int,
             generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample `response_len` tokens per prompt without autograd; their log-probs too."""
    seq = prompts.unsqueeze(1)
    picked, logps = [], []
    with torch.no_grad():
        for _ in range(response_len):
            logits = policy(seq)[:, -1, :]
            probs = torch.softmax(logits, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)
            logps.append(torch.log_softmax(logits, dim=-1).gather(1, nxt))
            picked.append(nxt)
            seq = torch.cat([seq, nxt], dim=1)
    return torch.cat(picked, 1).long(), torch.cat(logps, 1).float()


def sequence_logprobs(policy: nn.Module, prompts: torch.Tensor,
                      responses: torch.Tensor) -> torch.Tensor:
    """Log-probability of each response token under `policy`, one forward."""
    logits = policy(_inputs(prompts, responses))
    return F.log_softmax(logits, dim=-1).gather(2, responses.unsqueeze(2)).squeeze(2)


def kl_penalized_rewards(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                         scores: torch.Tensor, mask: torch.Tensor,
                         kl_coef: float) -> torch.Tensor:
    """k1 KL penalty per token, the sequence score added at each row's last token."""
    penalty = -kl_coef * (logprobs - ref_logprobs)
    rewards = torch.where(mask, penalty, torch.zeros_like(penalty))
    last = mask.long().sum(dim=1) - 1
    bonus = torch.zeros_like(rewards)
    bonus.scatter_(1, last.unsqueeze(1), scores.to(rewards.dtype).unsqueeze(1))
    return rewards + bonus


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with V = 0 and A = 0 past each row's last token; no whitening."""
    m = mask.to(rewards.dtype)
    r = rewards.detach() * m
    v = values.detach() * m
    steps = rewards.shape[1]
    adv = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in reversed(range(steps)):
        v_next = v[:, t + 1] if t + 1 < steps else torch.zeros_like(running)
        delta = r[:, t] + gamma * v_next - v[:, t]
        running = (delta + gamma * lam * running) * m[:, t]
        adv[:, t] = running
    return adv, (adv + v) * m


def grpo_advantages(scores: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """Group-normalised advantages with the sample (Bessel) standard deviation."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    if scores.numel() % group_size:
        raise ValueError(f"{scores.numel()} scores do not split into groups of {group_size}")
    groups = scores.reshape(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    spread = groups.std(dim=1, keepdim=True, correction=1)
    return (centred / (spread + eps)).reshape(-1).to(torch.float32)


def make_experience(actor: nn.Module, reference: nn.Module, critic: nn.Module | None,
                    prompts: torch.Tensor, cfg: RLHFConfig, generator: torch.Generator,
                    version: int = 0) -> Experience:
    """Generate, score and reward one batch (README §4 steps 1–4)."""
    responses, old = generate(actor, prompts, cfg.response_len, generator)
    mask = torch.ones_like(responses, dtype=torch.bool)
    with torch.no_grad():
        ref = sequence_logprobs(reference, prompts, responses)
        values = critic(_inputs(prompts, responses)) if cfg.advantage == "gae" else None
    scores = toy_reward(prompts, responses, cfg.vocab)
    rewards = kl_penalized_rewards(old, ref, scores, mask, cfg.kl_coef)
    returns = None
    if cfg.advantage == "gae":
        assert values is not None
        advantages, returns = gae_advantages(rewards, values, mask, cfg.gamma, cfg.lam)
    else:
        per_seq = grpo_advantages(rewards.sum(dim=1), cfg.group_size)
        advantages = per_seq.unsqueeze(1).expand_as(rewards).clone()
    return Experience(prompts=prompts, responses=responses, mask=mask, old_logprobs=old,
                      ref_logprobs=ref, values=values, scores=scores, rewards=rewards,
                      advantages=advantages, returns=returns, version=version)


def _average_grads(module: nn.Module, group: dist.ProcessGroup | None) -> None:
    if group is None:
        return
    size = dist.get_world_size(group)
    for p in module.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group)
        p.grad.div_(size)


def ppo_train_step(actor: nn.Module, critic: nn.Module | None,
                   actor_opt: torch.optim.Optimizer, critic_opt: torch.optim.Optimizer | None,
                   exp: Experience, cfg: RLHFConfig,
                   group: dist.ProcessGroup | None = None) -> None:
    """`cfg.ppo_epochs` full-batch PPO steps (and critic steps for "gae")."""
    use_critic = cfg.advantage == "gae" and critic is not None and critic_opt is not None
    for _ in range(cfg.ppo_epochs):
        actor_opt.zero_grad(set_to_none=False)
        logp = sequence_logprobs(actor, exp.prompts, exp.responses)
        ppo_policy_loss(logp, exp.old_logprobs, exp.advantages, exp.mask, cfg.clip).backward()
        _average_grads(actor, group)
        actor_opt.step()
        if use_critic:
            assert critic is not None and critic_opt is not None and exp.returns is not None
            critic_opt.zero_grad(set_to_none=False)
            vals = critic(_inputs(exp.prompts, exp.responses))
            value_loss(vals, exp.returns, exp.mask).backward()
            _average_grads(critic, group)
            critic_opt.step()
    with torch.no_grad():
        actor.num_updates.add_(1)
