"""kl_penalty (k1, k2, k3 against the analytic KL) and rlhf_token_rewards (KL part, score place)."""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ppo._cases import F64, probe, run_probes
from grader.suites.ppo._ref import close, error_of, result, said

KL_COEF = 0.05


def token_logps(seed: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, ref_logp) of sampled tokens: log-probabilities in (-4, 0), log-ratios up to +-3."""
    gen = seeded_generator(seed)
    logp = -torch.rand(shape, generator=gen, dtype=F64) * 4.0
    return logp, logp - (torch.rand(shape, generator=gen, dtype=F64) - 0.5) * 6.0


def small_distributions() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(log pi, log pi_ref) over every outcome of two small categorical distributions."""
    pairs = [([0.5, 0.2, 0.1, 0.1, 0.1], [0.1, 0.3, 0.3, 0.2, 0.1]),
             ([0.9, 0.05, 0.05], [0.4, 0.4, 0.2])]
    return [(torch.tensor(p, dtype=F64).log(), torch.tensor(q, dtype=F64).log())
            for p, q in pairs]


def analytic_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """KL(pi || pi_ref) = sum_x pi(x) (log pi(x) - log pi_ref(x))."""
    return (logp.exp() * (logp - ref_logp)).sum()


REWARD_MASK = torch.tensor([
    [0, 0, 1, 1, 1, 0],  # prompt, response, one padding token
    [1, 1, 1, 1, 1, 1],  # response fills the row
    [1, 1, 0, 0, 0, 0],  # short response, right padding
    [0, 0, 0, 0, 0, 0],  # no valid token
    [1, 0, 0, 0, 0, 0],  # one token, at t = 0
], dtype=torch.bool)
SCORES = torch.tensor([2.5, -1.0, 0.75, 9.0, -3.0], dtype=F64)


def ref_rewards(scores: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
    rewards = torch.where(mask, -KL_COEF * (logp - ref_logp), 0.0)
    for b in range(mask.shape[0]):
        positions = mask[b].nonzero()
        if len(positions):
            rewards[b, int(positions[-1])] += scores[b]
    return rewards


def build() -> dict[str, dict]:
    logp, ref = token_logps(61, (3, 4))
    probes = {f"per_token_{k}": probe("kl_penalty", logp, ref, k) for k in ("k1", "k2", "k3")}
    probes["default"] = probe("kl_penalty", logp, ref)
    probes["bad_estimator"] = probe("kl_penalty", logp, ref, "k4")
    wide, wide_ref = token_logps(62, (64,))
    probes["k3_wide"] = probe("kl_penalty", wide, wide_ref, "k3")
    for i, (lp, lq) in enumerate(small_distributions()):
        for k in ("k1", "k3"):
            probes[f"dist{i}_{k}"] = probe("kl_penalty", lp, lq, k)
    rlogp, rref = token_logps(63, tuple(REWARD_MASK.shape))
    probes["rewards_kl_only"] = probe("rlhf_token_rewards", torch.zeros(5, dtype=F64), rlogp,
                                      rref, REWARD_MASK, KL_COEF)
    probes["rewards"] = probe("rlhf_token_rewards", SCORES, rlogp, rref, REWARD_MASK, KL_COEF)
    probes["rewards_int_mask"] = probe("rlhf_token_rewards", SCORES, rlogp, rref,
                                       REWARD_MASK.to(torch.int64), KL_COEF)
    return probes


@pytest.fixture(scope="module")
def probes(launch):
    return run_probes(launch, build())


@pytest.mark.points(2)
@pytest.mark.exercises("kl_penalty")
def test_per_token_estimators(probes):
    logp, ref = token_logps(61, (3, 4))
    log_ratio = logp - ref
    expected = {"k1": log_ratio, "k2": 0.5 * log_ratio ** 2,
                "k3": torch.exp(-log_ratio) - 1 + log_ratio}
    for name, value in expected.items():
        close(result(probes, f"per_token_{name}", "kl_penalty")["result"], value,
              f"kl_penalty(estimator={name!r}) per token",
              "log_ratio = logp - ref_logp (policy minus reference); k3 = (q - 1) - log q with "
              "q = pi_ref/pi (README §7)")
    close(result(probes, "default", "kl_penalty")["result"], expected["k1"],
          "kl_penalty with the default estimator", "the default is 'k1'")
    bad = error_of(probes, "bad_estimator")  # a stub raises "not implemented" here
    assert bad is not None and bad.get("type") == "ValueError", (
        f"kl_penalty(estimator='k4') should raise ValueError, "
        f"{'returned a value' if bad is None else 'raised ' + str(bad.get('type'))}")


@pytest.mark.points(3)
@pytest.mark.exercises("kl_penalty")
def test_k1_and_k3_are_unbiased_and_k3_non_negative(probes):
    for i, (lp, lq) in enumerate(small_distributions()):
        kl = analytic_kl(lp, lq)
        for k in ("k1", "k3"):
            got = result(probes, f"dist{i}_{k}", "kl_penalty")["result"]
            weighted = (lp.exp() * got.to(F64)).sum() if isinstance(got, torch.Tensor) else got
            close(weighted, kl, f"E_pi[{k}] over a small categorical distribution vs the "
                                f"analytic KL(pi || pi_ref)",
                  "k1 and k3 are unbiased estimators of KL(pi || pi_ref) on samples of pi; "
                  "check which log-probability is subtracted from which (README §7)")
    wide = result(probes, "k3_wide", "kl_penalty")["result"]
    assert isinstance(wide, torch.Tensor) and bool((wide >= -1e-12).all()), (
        "kl_penalty(estimator='k3') returned negative values; (q - 1) - log q >= 0 for every "
        "q > 0 (README §7)")


@pytest.mark.points(2)
@pytest.mark.exercises("rlhf_token_rewards")
def test_rewards_kl_part_on_valid_tokens(probes):
    rlogp, rref = token_logps(63, tuple(REWARD_MASK.shape))
    expected = ref_rewards(torch.zeros(5, dtype=F64), rlogp, rref, REWARD_MASK)
    close(result(probes, "rewards_kl_only", "rlhf_token_rewards")["result"], expected,
          "rlhf_token_rewards with zero scores",
          "reward = -kl_coef * (logp - ref_logp) at valid tokens, 0 at masked ones (README §6)")


@pytest.mark.points(3)
@pytest.mark.exercises("rlhf_token_rewards")
def test_score_at_the_last_valid_token(probes):
    rlogp, rref = token_logps(63, tuple(REWARD_MASK.shape))
    expected = ref_rewards(SCORES, rlogp, rref, REWARD_MASK)
    hint = said(
        hint=("add scores[b] at the largest t with mask[b, t] true: rows may start with prompt "
            "tokens and end with padding, the last valid token may be t = 0; a row without "
            "valid tokens gets nothing (README §6)"))
    close(result(probes, "rewards", "rlhf_token_rewards")["result"], expected,
          "rlhf_token_rewards with prompt and padding in the mask", hint)
    close(result(probes, "rewards_int_mask", "rlhf_token_rewards")["result"], expected,
          "rlhf_token_rewards with a 0/1 integer mask", "accept masks of any dtype")
