"""Speculative decoding that keeps the target's distribution (README §4-§5). You edit this file.

A cheap draft model proposes k tokens; the target scores all of them in one forward; rejection
sampling keeps a prefix of the proposals and draws one more token, so that every emitted token
is distributed exactly as if the target alone had sampled it. Probabilities come from
`assignments.speculative.lm.next_token_probs`; the models follow `lm.CausalLM`.
"""

from __future__ import annotations

import torch

from assignments.speculative.lm import CausalLM, next_token_probs  # noqa: F401


def rejection_sample(draft_probs: torch.Tensor, target_probs: torch.Tensor,
                     draft_tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Verify k draft tokens against the target; returns the emitted tokens (README §4).

    draft_probs   [k, V] float64: row i is the draft's distribution q_i the token
                  draft_tokens[i] was sampled from
    target_probs  [k + 1, V] float64: row i is the target's distribution p_i at the same
                  position (after the same prefix); row k is the target's distribution after
                  all k draft tokens
    draft_tokens  [k] long, k >= 0; draft_probs[i, draft_tokens[i]] > 0
    generator     a torch.Generator: every random draw comes from it

    For i = 0, 1, ...: accept draft_tokens[i] with probability min(1, p_i(x) / q_i(x)), x the
    token. At the first rejection, stop and draw one token from the residual
    normalise(max(0, p_i - q_i)) (if the residual sums to 0, draw from p_i). If all k are
    accepted, draw a bonus token from p_k. Returns a 1-D long tensor of n + 1 tokens: the n
    accepted draft tokens (n in 0..k) followed by the drawn one. Does not modify its inputs.

    The emitted tokens are then distributed exactly as tokens sampled from the target, whatever
    the draft. The order and number of draws from `generator` are yours to choose: only the
    distribution of the result is graded. With one-hot rows (temperature 0) the result is
    deterministic: the draft tokens up to the first one that is not the target's argmax, then
    the target's argmax.
    """
    raise NotImplementedError("rejection_sample: see README §4")


def acceptance_rate(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """alpha = sum over x of min(p(x), q(x)) along the last dimension (README §5).

    draft_probs and target_probs have the same shape [..., V]; returns float64 of shape [...]
    (a 0-d tensor for 1-D inputs). alpha is the probability that one draft token sampled from q
    is accepted against p, and 1 - alpha is the total-variation distance between p and q.
    """
    raise NotImplementedError("acceptance_rate: see README §5")


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens emitted per target forward with k drafts accepted independently with
    probability alpha: 1 + alpha + ... + alpha**k = (1 - alpha**(k+1)) / (1 - alpha), and k + 1
    at alpha = 1 (README §5). alpha outside [0, 1] or k < 0 is a ValueError."""
    raise NotImplementedError("expected_tokens_per_step: see README §5")


def speculative_generate(target: CausalLM, draft: CausalLM, prompt: torch.Tensor, k: int,
                         max_new_tokens: int, temperature: float, generator: torch.Generator
                         ) -> tuple[torch.Tensor, dict[str, int]]:
    """Generate max_new_tokens tokens after `prompt` with draft-and-verify rounds (README §5).

    target, draft   models with the same vocab_size; both caches are reset at the start, and
                    whatever they hold at the end is not graded
    prompt          1-D long tensor of at least one token
    k               draft tokens per round, k >= 0 (k = 0 is plain sampling from the target)
    temperature     >= 0; both models' distributions are next_token_probs(logits, temperature)
                    (temperature 0: greedy, the output is the target's greedy continuation)

    Each round, with `seq` the prompt and every token emitted so far and r tokens still to go:
      1. k' = min(k, r - 1) draft tokens d_1..d_k', each sampled (from `generator`) from the
         draft's distribution after seq + d_1..d_{i-1};
      2. exactly one target.forward, which yields the target's distributions after seq,
         seq + d_1, ..., seq + d_1..d_k' (k' + 1 rows);
      3. rejection_sample on them (or its equivalent): n accepted drafts and one more token
         are appended to seq;
      4. both caches are rolled back so that they hold no rejected draft token.
    Rounds repeat until max_new_tokens tokens are emitted (never more: k' caps the round).

    Returns (tokens, stats): tokens is a 1-D long tensor of the max_new_tokens new tokens (not
    the prompt); stats is a dict of ints summed over rounds:
      "rounds"    rounds run; target.forward is called exactly once per round, never elsewhere
      "drafted"   sum of k'
      "accepted"  draft tokens accepted (sum of n)
      "rejected"  rounds that ended with a rejection (n < k')
    so accepted / (accepted + rejected) estimates alpha. max_new_tokens = 0 returns an empty
    tensor, all stats 0. k < 0, max_new_tokens < 0, an empty prompt or models of different
    vocab sizes raise ValueError before any forward.
    """
    raise NotImplementedError("speculative_generate: see README §5")
