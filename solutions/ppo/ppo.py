"""PPO losses, GAE and the RLHF per-token reward (reference solution).

Every function is a pure function of its tensor arguments: nothing is modified in place, and the
result has the floating dtype of the main input. Masks are bool tensors (or 0/1 of any dtype) of
the same shape as the values they select; a masked-out position never changes a result. See
assignments/ppo/README.md for the derivations; section numbers below refer to it.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


# ---- masked statistics (README §8) ----------------------------------------------------------

def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None,
                dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is true; 0 where it selects nothing."""
    if mask is None:
        return x.mean() if dim is None else x.mean(dim)
    keep = mask.to(torch.bool)
    # torch.where, not x * mask: a padded position may hold anything, and 0 * inf is nan.
    selected = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
    if dim is None:
        return selected.sum() / keep.sum().clamp(min=1)
    return selected.sum(dim) / keep.sum(dim).clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor | None = None, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) with the masked mean and the biased masked variance."""
    mean = masked_mean(x, mask)
    # The biased variance (divide by the count): one valid element gives var 0, not 0/0.
    var = masked_mean((x - mean) ** 2, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


# ---- advantages (README §4) -------------------------------------------------------------------

def compute_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                truncated: torch.Tensor, next_values: torch.Tensor, gamma: float = 0.99,
                lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns over [T, num_envs] rollouts."""
    is_terminated = terminated.to(torch.bool)
    is_done = is_terminated | truncated.to(torch.bool)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    # A terminal state is worth 0; a truncated one is worth V(final observation), which the
    # caller put in next_values. torch.where, so whatever sits there after a termination is unused.
    bootstrap = torch.where(is_terminated, zero, next_values.to(values.dtype))
    deltas = rewards.to(values.dtype) + gamma * bootstrap - values
    # The recursion A_t = delta_t + gamma*lam*A_{t+1} must not cross an episode boundary: after a
    # done step the next row of the rollout belongs to a new episode.
    carry = torch.where(is_done, zero, torch.ones((), dtype=values.dtype, device=values.device))
    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        running = deltas[t] + gamma * lam * carry[t] * running
        advantages[t] = running
    return advantages, advantages + values


# ---- losses (README §2, §3 and §5) --------------------------------------------------------

def ppo_clip_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                  clip_eps: float = 0.2, mask: torch.Tensor | None = None,
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate loss (to minimise) and its statistics."""
    log_ratio = logp_new - logp_old
    ratio = torch.exp(log_ratio)
    # Minimising the max of the two negated terms = maximising the min of the two objectives:
    # the pessimistic bound of Schulman et al. (2017), eq. 7.
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean(((ratio - 1.0).abs() > clip_eps).to(ratio.dtype), mask),
            # k3 of KL(old || new) on samples of the old policy: (r - 1) - log r >= 0.
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def value_loss(values: torch.Tensor, old_values: torch.Tensor | None, returns: torch.Tensor,
               clip_eps: float | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """0.5 * masked mean of the squared error, optionally with PPO's value clipping."""
    error = (values - returns) ** 2
    if clip_eps is not None:
        if old_values is None:
            raise ValueError("value_loss: clip_eps needs old_values to clip around")
        clipped_values = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
        error = torch.maximum(error, (clipped_values - returns) ** 2)
    return 0.5 * masked_mean(error, mask)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Masked mean over positions of the entropy (nats) of softmax(logits) along the last dim."""
    probs = torch.softmax(logits, dim=-1)
    # entr(p) = -p log p with entr(0) = 0: a -inf logit (an impossible token) adds nothing.
    per_position = torch.special.entr(probs).sum(dim=-1)
    return masked_mean(per_position, mask)


# ---- RLHF (README §6 and §7) ------------------------------------------------------------------

def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) on tokens sampled from the policy."""
    log_ratio = logp - ref_logp  # log pi(x) - log pi_ref(x)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio ** 2
    if estimator == "k3":
        # (q - 1) - log q with q = pi_ref/pi; expm1 keeps precision when q is close to 1.
        return torch.expm1(-log_ratio) + log_ratio
    raise ValueError(f"kl_penalty: unknown estimator {estimator!r}; use one of {KL_ESTIMATORS}")


def rlhf_token_rewards(scores: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                       mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token rewards [batch, T]: -kl_coef * k1 on valid tokens, the score on the last one."""
    keep = mask.to(torch.bool)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    rewards = torch.where(keep, -kl_coef * kl_penalty(logp, ref_logp, "k1"), zero)
    # The last valid token is the largest t with mask true (the prompt and the padding after the
    # end of the response are both masked out); a row with no valid token gets no score.
    positions = torch.arange(keep.shape[1], device=keep.device).expand_as(keep)
    last = torch.where(keep, positions, -1).max(dim=1).values
    rows = torch.nonzero(last >= 0).squeeze(1)
    rewards[rows, last[rows]] += scores[rows].to(rewards.dtype)
    return rewards
