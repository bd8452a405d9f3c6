"""An independent ppo submission, written from the stub's docstrings and README only.

Different from the reference where the contract allows: masks are applied with `torch.where`
and a clamped count, GAE runs as a reversed scan with explicit episode-continuation factors,
entropy zeroes the terms of impossible actions before summing, and the RLHF score is placed
with a scatter at each row's last valid index.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def _valid(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if mask is None:
        return torch.ones_like(like, dtype=torch.bool)
    return mask.to(device=like.device) != 0


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None,
                dim: int | None = None) -> torch.Tensor:
    if mask is None:
        return x.mean() if dim is None else x.mean(dim)
    valid = _valid(mask, x)
    kept = torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))
    if dim is None:
        total, count = kept.sum(), valid.sum()
    else:
        total, count = kept.sum(dim), valid.sum(dim)
    return total / count.clamp(min=1).to(x.dtype)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor | None = None, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    centre = masked_mean(x, mask)
    spread = masked_mean((x - centre) ** 2, mask)
    scaled = (x - centre) * torch.rsqrt(spread + eps)
    return scaled if shift_mean else scaled + centre


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                truncated: torch.Tensor, next_values: torch.Tensor, gamma: float = 0.99,
                lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = values.dtype
    rewards, next_values = rewards.detach().to(dtype), next_values.detach().to(dtype)
    values = values.detach()
    ended = terminated != 0
    stops = ended | (truncated != 0)
    zero = torch.zeros((), dtype=dtype, device=values.device)
    bootstrap = torch.where(ended, zero, next_values)
    deltas = rewards + gamma * bootstrap - values
    advantages = torch.empty_like(values)
    carry = torch.zeros_like(values[0]) if values.shape[0] else None
    for t in reversed(range(values.shape[0])):
        carry = deltas[t] + gamma * lam * torch.where(stops[t], zero, carry)
        advantages[t] = carry
    return advantages, advantages + values


def ppo_clip_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                  clip_eps: float = 0.2, mask: torch.Tensor | None = None,
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    log_ratio = logp_new - logp_old
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean(((ratio - 1.0).abs() > clip_eps).to(ratio.dtype), mask),
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, {name: value.detach() for name, value in stats.items()}


def value_loss(values: torch.Tensor, old_values: torch.Tensor | None, returns: torch.Tensor,
               clip_eps: float | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    errors = (values - returns) ** 2
    if clip_eps is not None:
        if old_values is None:
            raise ValueError("value_loss: clip_eps needs old_values")
        moved = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
        errors = torch.maximum(errors, (moved - returns) ** 2)
    return 0.5 * masked_mean(errors, mask)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    log_p = torch.log_softmax(logits, dim=-1)
    finite = torch.isfinite(log_p)
    safe_log_p = torch.where(finite, log_p, torch.zeros((), dtype=log_p.dtype,
                                                         device=log_p.device))
    per_dist = -(safe_log_p.exp() * safe_log_p * finite).sum(dim=-1)
    return masked_mean(per_dist, mask)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, not {estimator!r}")
    log_ratio = logp - ref_logp
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio * log_ratio
    return torch.exp(-log_ratio) - 1.0 + log_ratio


def rlhf_token_rewards(scores: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                       mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    valid = _valid(mask, logp)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    rewards = torch.where(valid, -kl_coef * kl_penalty(logp, ref_logp, "k1"), zero)
    steps = torch.arange(logp.shape[-1], device=logp.device).expand_as(valid)
    last = torch.where(valid, steps, torch.full_like(steps, -1)).amax(dim=-1)
    has_token = last >= 0
    bonus = torch.zeros_like(rewards)
    bonus.scatter_(-1, last.clamp(min=0).unsqueeze(-1),
                   torch.where(has_token, scores.to(logp.dtype), zero).unsqueeze(-1))
    return rewards + bonus
