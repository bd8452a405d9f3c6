"""Reference solution: the computation flow of one RLHF iteration (README §2–§4).

The four roles follow InstructGPT (Ouyang et al., 2022): the actor samples, the reward model
scores the whole sequence, the frozen reference anchors the actor through a per-token KL
penalty, and the critic (PPO with GAE) or the group of samples (GRPO, Shao et al., 2024)
provides the baseline.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from assignments.rlhf_system.toy import (
    Experience,
    RLHFConfig,
    ppo_policy_loss,
    toy_reward,
    value_loss,
)


def _inputs(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    # Position t of the model's input predicts response token t: the prompt, then every
    # response token but the last.
    return torch.cat([prompts[:, None], responses[:, :-1]], dim=1)


def generate(policy: nn.Module, prompts: torch.Tensor, response_len: int,
             generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample `response_len` tokens after each prompt from `policy`, without autograd."""
    # Sampling is inference: no graph, or every step's activations stay alive until the
    # tensors die, and the old log-probs would drag the whole rollout into the PPO backward.
    with torch.no_grad():
        tokens = prompts[:, None]
        picked: list[torch.Tensor] = []
        logps: list[torch.Tensor] = []
        for _ in range(response_len):
            logits = policy(tokens)[:, -1, :].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            nxt = torch.multinomial(log_probs.exp(), 1, generator=generator)
            picked.append(nxt[:, 0])
            logps.append(log_probs.gather(1, nxt)[:, 0])
            tokens = torch.cat([tokens, nxt], dim=1)
    return torch.stack(picked, dim=1), torch.stack(logps, dim=1)


def sequence_logprobs(policy: nn.Module, prompts: torch.Tensor,
                      responses: torch.Tensor) -> torch.Tensor:
    """Log-probability under `policy` of each response token, in one forward pass."""
    # Teacher forcing: one forward over the whole sequence scores every token at once.
    logits = policy(_inputs(prompts, responses)).float()
    return torch.log_softmax(logits, dim=-1).gather(2, responses[..., None])[..., 0]


def kl_penalized_rewards(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                         scores: torch.Tensor, mask: torch.Tensor,
                         kl_coef: float) -> torch.Tensor:
    """The per-token RLHF reward: a KL penalty at every response token, the score at the last."""
    # k1 estimator of KL(pi || pi_ref) per sampled token; it penalises drifting away.
    rewards = -kl_coef * (logprobs - ref_logprobs)
    rewards = torch.where(mask, rewards, torch.zeros_like(rewards))
    # The reward model judges the finished sequence, so its score lands on the last token.
    last = mask.sum(dim=1) - 1
    rows = torch.arange(rewards.shape[0])
    rewards[rows, last] += scores.to(rewards.dtype)
    return rewards


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's response tokens."""
    m = mask.to(rewards.dtype)
    values = values.detach() * m
    rewards = rewards * m
    T = rewards.shape[1]
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_adv = torch.zeros_like(rewards[:, 0])
    # Backwards in time (Schulman et al., 2016): A_t = delta_t + gamma*lam*A_{t+1}. Masked
    # positions carry nothing, so V and A after a row's last token are 0.
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a = (delta + gamma * lam * next_adv) * m[:, t]
        adv[:, t] = a
        next_value = values[:, t]
        next_adv = a
    return adv, (adv + values) * m


def grpo_advantages(scores: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO's group-normalised advantage of each sequence."""
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 (a group's std needs two samples), "
                         f"got {group_size}")
    if scores.shape[0] % group_size != 0:
        raise ValueError(f"{scores.shape[0]} scores do not split into groups of {group_size}")
    # The group of samples of one prompt is the baseline: no critic (Shao et al., 2024).
    groups = scores.reshape(-1, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, keepdim=True)  # sample std (divisor group_size - 1)
    return ((groups - mean) / (std + eps)).reshape(-1)


def make_experience(actor: nn.Module, reference: nn.Module, critic: nn.Module | None,
                    prompts: torch.Tensor, cfg: RLHFConfig, generator: torch.Generator,
                    version: int = 0) -> Experience:
    """Generate, score and reward one batch: the first half of an RLHF iteration."""
    responses, old_logprobs = generate(actor, prompts, cfg.response_len, generator)
    mask = torch.ones_like(responses, dtype=torch.bool)
    # The frozen models only read: no graph for them either.
    with torch.no_grad():
        ref_logprobs = sequence_logprobs(reference, prompts, responses)
        values = None
        if cfg.advantage == "gae":
            if critic is None:
                raise ValueError("advantage 'gae' needs a critic")
            values = critic(_inputs(prompts, responses)).float()
    scores = toy_reward(prompts, responses, cfg.vocab)
    rewards = kl_penalized_rewards(old_logprobs, ref_logprobs, scores, mask, cfg.kl_coef)
    returns = None
    if values is not None:
        advantages, returns = gae_advantages(rewards, values, mask, cfg.gamma, cfg.lam)
    else:
        per_seq = grpo_advantages(rewards.sum(dim=1), cfg.group_size)
        advantages = per_seq[:, None] * mask.to(per_seq.dtype)
    return Experience(prompts=prompts, responses=responses, mask=mask,
                      old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, values=values,
                      scores=scores, rewards=rewards, advantages=advantages, returns=returns,
                      version=version)


def _average_gradients(module: nn.Module, group: dist.ProcessGroup | None) -> None:
    # Data parallelism: the mean of the per-rank gradients is the full batch's gradient
    # (equal batch shapes on every rank). One flat all-reduce for the whole (tiny) model, as
    # DDP's buckets do for a large one: one message latency instead of one per tensor.
    if group is None:
        return
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def ppo_train_step(actor: nn.Module, critic: nn.Module | None,
                   actor_opt: torch.optim.Optimizer, critic_opt: torch.optim.Optimizer | None,
                   exp: Experience, cfg: RLHFConfig,
                   group: dist.ProcessGroup | None = None) -> None:
    """The second half of an iteration: cfg.ppo_epochs full-batch PPO steps on `exp`."""
    for _ in range(cfg.ppo_epochs):
        actor_opt.zero_grad(set_to_none=True)
        logprobs = sequence_logprobs(actor, exp.prompts, exp.responses)
        loss = ppo_policy_loss(logprobs, exp.old_logprobs, exp.advantages, exp.mask, cfg.clip)
        loss.backward()
        _average_gradients(actor, group)
        actor_opt.step()
        if cfg.advantage == "gae" and critic is not None and critic_opt is not None:
            critic_opt.zero_grad(set_to_none=True)
            values = critic(_inputs(exp.prompts, exp.responses))
            if exp.returns is None:
                raise ValueError("a 'gae' experience carries returns; this one has none")
            value_loss(values, exp.returns, exp.mask).backward()
            _average_gradients(critic, group)
            critic_opt.step()
    with torch.no_grad():
        actor.num_updates += 1
