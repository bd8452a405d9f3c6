"""PPO losses, GAE and the RLHF per-token reward: the functions you write (README §10).

Conventions for every function here:
- Pure functions: nothing is modified in place; results are new tensors.
- Floating results have the dtype and device of the main input (`x`, `values`, `logp_new`,
  `logits`, `logp`), so float64 in gives float64 out.
- A `mask` is a bool tensor (or 0/1 of any dtype) of the same shape as the values it selects;
  true/1 marks a valid position. A masked-out position never changes a result, whatever finite
  value it holds. `mask=None` means every position is valid.
- "Masked mean" is one mean over all valid elements (not a mean of per-row means), and a
  masked mean that selects nothing is 0, never nan.
- Gradients flow through the tensors a training step differentiates (`x`, `values`,
  `logp_new`, `logits`); the others are data.

`train_cartpole.py` (provided) runs PPO on CartPole-v1 with these functions:
`python -m assignments.ppo.train_cartpole`.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


# ---- masked statistics (README §8) ----------------------------------------------------------

def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None,
                dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is true.

    Args:
        x: float tensor of any shape.
        mask: bool (or 0/1) tensor of x's shape, or None (plain mean).
        dim: None reduces over every element (a 0-dim result); an int reduces that dimension
            only (the result has x's shape without `dim`).

    Returns:
        sum of x over valid positions / number of valid positions, in x's dtype. Where the mask
        selects nothing (a row that is all padding) the result is 0, not nan. Differentiable
        with respect to x.

    Spec without masks: `x.mean()` or `x.mean(dim)`.
    """
    raise NotImplementedError("masked_mean: see README §8")


def masked_whiten(x: torch.Tensor, mask: torch.Tensor | None = None, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    """Normalise `x` to mean 0 and variance 1 over its valid positions (one global statistic).

    mean = masked_mean(x, mask); var = masked_mean((x - mean)**2, mask) (the biased variance:
    divide by the count, not count - 1); result = (x - mean) / sqrt(var + eps). With
    `shift_mean=False` the mean is added back: (x - mean) / sqrt(var + eps) + mean, which
    rescales the spread but keeps the mean where it was.

    Args:
        x: float tensor of any shape (e.g. advantages [batch, T]).
        mask: bool (or 0/1) tensor of x's shape, or None.
        shift_mean: see above.
        eps: added to the variance, so that one valid element or a constant x gives 0, not nan.

    Returns:
        A tensor of x's shape and dtype. Values at masked-out positions are unspecified (tests
        ignore them) but must not affect the valid ones.
    """
    raise NotImplementedError("masked_whiten: see README §8")


# ---- advantages (README §4) -------------------------------------------------------------------

def compute_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                truncated: torch.Tensor, next_values: torch.Tensor, gamma: float = 0.99,
                lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a rollout of T steps of num_envs environments.

    Every argument is [T, num_envs]; row t is step t, in time order. For step t of env e:
    rewards[t] is the reward of the action taken in state s_t; values[t] = V(s_t);
    terminated[t] / truncated[t] (bool or 0/1) say whether the episode ended at this step by
    reaching a terminal state / by a time limit; next_values[t] = V(s_{t+1}), the value of the
    state the step led to. For a truncated step, next_values[t] is the value of the final
    observation of the episode (not of the next episode's first observation).

        delta_t = rewards[t] + gamma * (0 if terminated[t] else next_values[t]) - values[t]
        A_t     = delta_t + gamma * lam * (0 if terminated[t] or truncated[t] else A_{t+1})
        A_T     = 0 (after the last row: next_values[T-1] already bootstraps the tail)

    A terminated step bootstraps 0 (whatever next_values holds there) and a truncated one
    bootstraps next_values[t]; both stop the recursion, since row t+1 starts a new episode.

    Returns:
        (advantages, returns), both [T, num_envs] in values' dtype, with
        returns = advantages + values. No gradient is needed: callers pass detached tensors.
    """
    raise NotImplementedError("compute_gae: see README §4")


# ---- losses (README §2, §3 and §5) -----------------------------------------------------------

def ppo_clip_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                  clip_eps: float = 0.2, mask: torch.Tensor | None = None,
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, as a loss to minimise, and its statistics.

    With r = exp(logp_new - logp_old) elementwise:

        loss = masked_mean(max(-A * r, -A * clamp(r, 1 - clip_eps, 1 + clip_eps)), mask)

    Args:
        logp_new: log pi_theta(a|s) of the taken actions/tokens under the current policy,
            any shape (e.g. [batch] or [batch, T]); the gradient flows through it.
        logp_old: the same under the policy that collected the data (a constant), same shape.
        advantages: A, same shape (a constant).
        clip_eps: half-width of the trust region for r.
        mask: bool (or 0/1) of the same shape, or None.

    Returns:
        (loss, stats): `loss` is a 0-dim tensor with gradient w.r.t. logp_new. `stats` maps
        names to detached 0-dim tensors, each a masked mean over valid positions:
            "clipfrac":   fraction with |r - 1| > clip_eps (strictly),
            "approx_kl":  mean of (r - 1) - log r, the k3 estimate of KL(old || new),
            "ratio_mean": mean of r.
    """
    raise NotImplementedError("ppo_clip_loss: see README §3")


def value_loss(values: torch.Tensor, old_values: torch.Tensor | None, returns: torch.Tensor,
               clip_eps: float | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The critic's loss: half the masked mean squared error against the returns.

    clip_eps None:   0.5 * masked_mean((values - returns)**2, mask)
    clip_eps given:  v_clip = old_values + clamp(values - old_values, -clip_eps, clip_eps)
                     0.5 * masked_mean(max((values - returns)**2, (v_clip - returns)**2), mask)

    Args:
        values: V(s) under the current critic, any shape; the gradient flows through it.
        old_values: V(s) under the critic that collected the data (a constant), same shape;
            may be None when clip_eps is None.
        returns: the regression targets (a constant), same shape.
        clip_eps: None (no value clipping) or the half-width of the clip around old_values.
        mask: bool (or 0/1) of the same shape, or None.

    Returns:
        A 0-dim tensor in values' dtype. Raises ValueError if clip_eps is given without
        old_values.
    """
    raise NotImplementedError("value_loss: see README §5")


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy (in nats) of the categorical distributions softmax(logits).

    Args:
        logits: [..., num_actions] unnormalised log-probabilities, e.g. [batch, 2] for CartPole
            or [batch, T, vocab] for a language model. Must be numerically stable for large
            logits (e.g. 1e3) and accept -inf entries (actions of probability 0, which add 0).
        mask: bool (or 0/1) of shape logits.shape[:-1] (one flag per distribution), or None.

    Returns:
        A 0-dim tensor: masked_mean over positions of H = -sum_a p_a log p_a, in logits' dtype,
        differentiable w.r.t. logits.
    """
    raise NotImplementedError("entropy_from_logits: see README §5")


# ---- RLHF (README §6 and §7) ------------------------------------------------------------------

def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from the policy pi.

    With log_ratio = logp - ref_logp (elementwise):
        "k1": log_ratio                                  (unbiased, can be negative)
        "k2": 0.5 * log_ratio**2                         (biased, low variance, >= 0)
        "k3": (q - 1) - log q with q = exp(-log_ratio),  (unbiased and >= 0)
              i.e. q = pi_ref(x) / pi(x)

    Args:
        logp: log pi(x) of the sampled tokens, any shape.
        ref_logp: log pi_ref(x) of the same tokens, same shape.
        estimator: "k1", "k2" or "k3".

    Returns:
        A tensor of logp's shape and dtype (no reduction). Raises ValueError for any other
        estimator name.
    """
    raise NotImplementedError("kl_penalty: see README §7")


def rlhf_token_rewards(scores: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                       mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """The KL-penalised per-token reward of RLHF.

    Args:
        scores: [batch] reward-model score of each whole response.
        logp: [batch, T] log-probabilities of the sampled tokens under the policy (actor).
        ref_logp: [batch, T] the same under the frozen reference model.
        mask: [batch, T] bool (or 0/1), true on response tokens. The prompt before and the
            padding after a response are false, so a row can look like [0, 0, 1, 1, 1, 0].
        kl_coef: beta, the weight of the KL penalty (a float >= 0).

    Returns:
        rewards [batch, T] in logp's dtype: -kl_coef * k1 (kl_penalty with "k1") at every
        valid token, 0 at masked-out tokens, plus scores[b] added at row b's last valid token
        (the largest t with mask[b, t] true). A row with no valid token is all zeros.
    """
    raise NotImplementedError("rlhf_token_rewards: see README §6")
