"""The computation flow of one RLHF iteration: generate, score, reward, advantages, update.

Read assignments/rlhf_system/README.md §2–§4 first. The four roles are the actor (the policy
being trained, a `TinyPolicy`), the critic (`TinyCritic`, "gae" only), the reward model
(`toy_reward`) and the reference (a frozen `TinyPolicy`), all from
`assignments/rlhf_system/toy.py` (provided, read-only).

Conventions used by every function below:
- B sequences, T response tokens each. Prompts are one token each: `prompts` [B] int64.
  `responses` [B, T] int64. Per-token tensors are [B, T] float32.
- The token at response position t is predicted from the sequence `prompt, r_0 .. r_{t-1}`:
  feed `tokens = cat([prompts[:, None], responses[:, :-1]], dim=1)` ([B, T]) to a model, and
  position t of its output belongs to response token t (logits for the actor and reference,
  the value of that state for the critic).
- `mask` [B, T] bool is True on the response tokens that exist; every row's True entries are
  a prefix of the row, and every row has at least one. The last response token of row b is at
  position `mask[b].sum() - 1`.
- Functions return new tensors and never modify their inputs in place.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from assignments.rlhf_system.toy import Experience, RLHFConfig

# ---- generation and log-probabilities (README §3) -------------------------------------------


def generate(policy: nn.Module, prompts: torch.Tensor, response_len: int,
             generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample `response_len` tokens after each prompt from `policy`, without autograd.

    At step t the next token of every row is drawn from softmax(logits) of the policy's output
    at the last position of the sequence so far (prompt and the t tokens sampled before), with
    `torch.multinomial(probs, 1, generator=generator)` (temperature 1, no top-k/top-p).
    Generation runs under `torch.no_grad()`: no autograd graph is built and no returned tensor
    requires grad. The policy is not modified (no training, no change of its train/eval mode).

    Args:
        policy: maps tokens [B, L] int64 to logits [B, L, vocab] (a `TinyPolicy`).
        prompts: [B] int64.
        response_len: T >= 1.
        generator: the CPU generator every draw uses; the same generator state gives the same
            responses.

    Returns:
        `(responses, logprobs)`: responses [B, T] int64 in [0, vocab); logprobs [B, T] float32,
        logprobs[b, t] = log softmax(logits)[responses[b, t]] at the step that sampled it.
    """
    raise NotImplementedError("generate: see README §3")


def sequence_logprobs(policy: nn.Module, prompts: torch.Tensor,
                      responses: torch.Tensor) -> torch.Tensor:
    """Log-probability under `policy` of each response token, in one forward pass.

    Args:
        policy: a `TinyPolicy` (actor or reference).
        prompts: [B] int64. responses: [B, T] int64.

    Returns:
        [B, T] float32: log softmax of the policy's logits at position t (of the input
        `cat([prompts[:, None], responses[:, :-1]], 1)`), taken at responses[:, t]. It carries
        autograd history when grad is enabled and the policy has trainable parameters (the PPO
        update differentiates it); the caller wraps it in `torch.no_grad()` when it should not.
    """
    raise NotImplementedError("sequence_logprobs: see README §3")


# ---- rewards and advantages (README §3) -----------------------------------------------------


def kl_penalized_rewards(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                         scores: torch.Tensor, mask: torch.Tensor,
                         kl_coef: float) -> torch.Tensor:
    """The per-token RLHF reward: a KL penalty at every response token, the score at the last.

        rewards[b, t] = -kl_coef * (logprobs[b, t] - ref_logprobs[b, t])   where mask[b, t]
        rewards[b, last_b] += scores[b]            with last_b = mask[b].sum() - 1
        rewards[b, t] = 0                          where not mask[b, t]

    (The KL estimator is k1, log pi - log pi_ref, per sampled token.)

    Args:
        logprobs, ref_logprobs: [B, T] float32 (actor at generation time, reference).
        scores: [B] float32, the reward model's score of each sequence.
        mask: [B, T] bool (see the module docstring).
        kl_coef: beta >= 0.

    Returns:
        rewards [B, T] float32, a new tensor.
    """
    raise NotImplementedError("kl_penalized_rewards: see README §3")


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's response tokens.

    With V(after the last response token) = 0:
        delta_t = rewards_t + gamma * V_{t+1} - V_t
        A_t     = delta_t + gamma * lam * A_{t+1}        (A after the last token = 0)
        returns_t = A_t + V_t
    computed on the tokens where mask is True; advantages and returns are 0 where it is False.
    No whitening (no normalisation of the advantages).

    Args:
        rewards, values: [B, T] float32. mask: [B, T] bool. gamma, lam: in [0, 1].

    Returns:
        `(advantages, returns)`, both [B, T] float32, new tensors without autograd history.
    """
    raise NotImplementedError("gae_advantages: see README §3")


def grpo_advantages(scores: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO's group-normalised advantage of each sequence.

    The B sequences form B / group_size groups of `group_size` consecutive rows (the samples
    of one prompt). Within a group g:
        A_b = (scores_b - mean_g) / (std_g + eps)
    with std_g the *sample* standard deviation (Bessel's correction, divisor group_size - 1,
    as `torch.std` computes by default). A group whose scores are all equal gets 0.

    Args:
        scores: [B] float32. group_size: >= 2 and dividing B. eps: > 0.

    Returns:
        [B] float32, a new tensor.

    Raises:
        ValueError: group_size < 2, or B not a multiple of group_size.
    """
    raise NotImplementedError("grpo_advantages: see README §3")


# ---- one iteration (README §4) --------------------------------------------------------------


def make_experience(actor: nn.Module, reference: nn.Module, critic: nn.Module | None,
                    prompts: torch.Tensor, cfg: RLHFConfig, generator: torch.Generator,
                    version: int = 0) -> Experience:
    """Generate, score and reward one batch: the first half of an RLHF iteration.

    1. responses, old_logprobs = generate(actor, prompts, cfg.response_len, generator);
       mask all True (the toy's responses always have T tokens).
    2. ref_logprobs = sequence_logprobs(reference, ...) and, for cfg.advantage == "gae",
       values = critic(cat([prompts[:, None], responses[:, :-1]], 1)), both without grad.
    3. scores = toy_reward(prompts, responses, cfg.vocab);
       rewards = kl_penalized_rewards(old_logprobs, ref_logprobs, scores, mask, cfg.kl_coef).
    4. "gae": advantages, returns = gae_advantages(rewards, values, mask, cfg.gamma, cfg.lam).
       "grpo": advantages[b, t] = grpo_advantages(rewards.sum(1), cfg.group_size)[b] on every
       response token (the group-normalised total reward of the sequence, KL included);
       values and returns are None.

    Args:
        actor, reference: `TinyPolicy`s. critic: a `TinyCritic`, or None for "grpo".
        prompts: [B] int64, groups of cfg.group_size equal prompts (as `make_prompts` gives).
        cfg: the configuration. generator: passed to `generate`.
        version: the actor weights' version, stored in the result.

    Returns:
        An `Experience` (toy.py) holding every tensor above; none requires grad. No model is
        modified.
    """
    raise NotImplementedError("make_experience: see README §4")


def ppo_train_step(actor: nn.Module, critic: nn.Module | None,
                   actor_opt: torch.optim.Optimizer, critic_opt: torch.optim.Optimizer | None,
                   exp: Experience, cfg: RLHFConfig,
                   group: dist.ProcessGroup | None = None) -> None:
    """The second half of an iteration: cfg.ppo_epochs full-batch PPO steps on `exp`.

    Each epoch: zero the gradients; loss = toy.ppo_policy_loss(sequence_logprobs(actor, ...),
    exp.old_logprobs, exp.advantages, exp.mask, cfg.clip); backward; when `group` is given
    (data parallelism over the ranks that train), replace every actor gradient by its mean over
    the group's ranks; actor_opt.step(). For "gae" the critic takes the same epochs with
    toy.value_loss(critic(tokens), exp.returns, exp.mask) and critic_opt (its gradients averaged
    over the group the same way). Finally add 1 to actor.num_updates (a buffer).

    Every rank of `group` must call it with batches of the same shape; the actor (and critic)
    stay identical on all of them if they were before. `group` None: no communication.
    """
    raise NotImplementedError("ppo_train_step: see README §4")
