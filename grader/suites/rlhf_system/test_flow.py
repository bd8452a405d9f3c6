"""The computation flow of one iteration (README §2–§4), against float64 references in the
parent. One single-rank launch runs every case (`_cases.flow_calls`), each in its own scope.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.compare import assert_close
from grader.suites.rlhf_system import _ref
from grader.suites.rlhf_system._cases import flow_run
from harness.cases import case_value

F32 = torch.float32
KL_HINT = "rewards_t = -kl_coef * (logprobs_t - ref_logprobs_t) on every response token"
KL_SIGN_HINT = ("KL penalty sign: the reward is -kl_coef * (logprobs - ref_logprobs), a cost "
                "for drifting from the reference")
LAST_HINT = ("the score belongs on the last response token of each row (mask[b].sum() - 1), "
             "not the first")
GAE_HINT = ("GAE backwards from the last valid token: delta_t = r_t + gamma*V_{t+1} - V_t, "
            "A_t = delta_t + gamma*lam*A_{t+1}, V and A after the last token 0")
GRPO_STD_HINT = ("GRPO normalises by the sample standard deviation (divisor group_size - 1, "
                 "torch.std's default), not the population one")
GRPO_HINT = "A = (score - group mean) / (group sample std + eps) over consecutive groups"
NO_GRAD_HINT = ("generation must run under torch.no_grad(): the policy's forwards ran with "
                "grad enabled, building a graph nobody differentiates")


def _got(launch: Any, impl: Any, name: str) -> tuple[Any, dict[str, Any]]:
    run = flow_run(launch, impl.text)
    return case_value(run["out"][name], name.split("/")[0]), run["calls"][name]


def _names(launch: Any, impl: Any, prefix: str) -> list[str]:
    return [n for n in flow_run(launch, impl.text)["calls"] if n.startswith(prefix)]


# ---- rewards --------------------------------------------------------------------------------


@pytest.mark.points(5)
@pytest.mark.exercises("kl_penalized_rewards")
def test_kl_rewards_masks_and_betas(launch, impl):
    for name in _names(launch, impl, "kl/"):
        got, s = _got(launch, impl, name)
        want = _ref.kl_rewards(s["logprobs"], s["ref"], s["scores"], s["mask"], s["beta"])
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            flipped = _ref.kl_rewards(s["ref"], s["logprobs"], s["scores"], s["mask"], s["beta"])
            first = _ref.kl_rewards(s["logprobs"], s["ref"], torch.zeros_like(s["scores"]),
                                    s["mask"], s["beta"])
            first[:, 0] += s["scores"].double()
            if s["beta"] > 0 and torch.allclose(got.double(), flipped, atol=1e-5):
                raise AssertionError(f"kl_penalized_rewards ({name}): {KL_SIGN_HINT}")
            if not torch.allclose(want, first) and torch.allclose(got.double(), first, atol=1e-5):
                raise AssertionError(f"kl_penalized_rewards ({name}): {LAST_HINT}")
        assert_close(got, want, dtype=F32, what=f"kl_penalized_rewards ({name})",
                     hint=f"{KL_HINT}; the score added at the last valid token; 0 off the mask")


# ---- advantages -----------------------------------------------------------------------------


@pytest.mark.points(5)
@pytest.mark.exercises("gae_advantages")
def test_gae_lambdas_and_masks(launch, impl):
    for name in _names(launch, impl, "gae/"):
        got, s = _got(launch, impl, name)
        adv, ret = _ref.gae(s["rewards"], s["values"], s["mask"], s["gamma"], s["lam"])
        if not (isinstance(got, list) and len(got) == 2):
            raise AssertionError(f"gae_advantages ({name}): return (advantages, returns), got "
                                 f"{type(got).__name__}")
        assert_close(got[0], adv, dtype=F32, what=f"gae_advantages ({name}) advantages",
                     hint=GAE_HINT)
        assert_close(got[1], ret, dtype=F32, what=f"gae_advantages ({name}) returns",
                     hint="returns_t = A_t + V_t on the mask, 0 off it")


@pytest.mark.points(4)
@pytest.mark.exercises("grpo_advantages")
def test_grpo_sample_std_groups(launch, impl):
    for name in _names(launch, impl, "grpo/"):
        got, s = _got(launch, impl, name)
        eps = s.get("kw", {}).get("eps", 1e-6)
        want = _ref.grpo(s["scores"], s["group"], eps)
        population = _ref.grpo(s["scores"], s["group"], eps, unbiased=False)
        if (isinstance(got, torch.Tensor) and got.shape == want.shape
                and not torch.allclose(want, population)
                and torch.allclose(got.double(), population, atol=1e-5)):
            raise AssertionError(f"grpo_advantages ({name}): {GRPO_STD_HINT}")
        assert_close(got, want, dtype=F32, what=f"grpo_advantages ({name})", hint=GRPO_HINT)


@pytest.mark.points(1)
@pytest.mark.exercises("grpo_advantages")
def test_grpo_rejects_bad_groups(launch, impl):
    for name in _names(launch, impl, "grpo_error/"):
        got, s = _got(launch, impl, name)
        assert got == "ValueError", (
            f"grpo_advantages ({name}): raise ValueError for group_size < 2 or a batch that "
            f"groups of group_size do not divide; got {got or 'no error'} "
            f"(B={s['scores'].shape[0]}, group_size={s['group']})")


# ---- generation and log-probs ---------------------------------------------------------------


def _generated(launch: Any, impl: Any, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    got, s = _got(launch, impl, name)
    what = f"generate ({name.split('/')[1]})"
    if got["grad_in_forward"] or got["requires_grad"]:
        raise AssertionError(f"{what}: {NO_GRAD_HINT}")
    resp = got["responses"]
    B, T = s["prompts"].shape[0], s["T"]
    assert isinstance(resp, torch.Tensor) and resp.dtype == torch.int64 and \
        tuple(resp.shape) == (B, T), f"{what}: responses must be [B, T] = [{B}, {T}] int64, got " \
        f"{getattr(resp, 'dtype', type(resp))} {tuple(getattr(resp, 'shape', ()))}"
    assert int(resp.min()) >= 0 and int(resp.max()) < 8, f"{what}: tokens outside [0, vocab)"
    return got, s


@pytest.mark.points(2)
@pytest.mark.exercises("generate")
def test_generate_without_grad_and_reproducible(launch, impl):
    for name in _names(launch, impl, "generate/"):
        got, s = _generated(launch, impl, name)
        what = f"generate ({name.split('/')[1]})"
        assert got["repeat_equal"], f"{what}: the same generator seed must give the same " \
            "responses and logprobs; draw every token with torch.multinomial(..., generator=)"
        assert got["unchanged"] and got["training"], \
            f"{what}: generation must not modify the policy (weights, or train/eval mode)"
        assert got["forwards"] >= 1, f"{what}: the policy was never called"


@pytest.mark.points(3)
@pytest.mark.exercises("generate")
def test_generate_logprobs_and_distribution(launch, impl):
    for name in _names(launch, impl, "generate/"):
        got, s = _generated(launch, impl, name)
        what = f"generate ({name.split('/')[1]})"
        want = _ref.response_logprobs(s["state"], s["prompts"], got["responses"])
        assert_close(got["logprobs"], want, dtype=F32, what=f"{what} logprobs",
                     hint="logprobs[b, t] is log softmax of the logits at the step that sampled "
                          "token t, taken at that token")
    got, s = _generated(launch, impl, "generate/distribution")
    probs = torch.softmax(_ref.policy_logits(s["state"], s["prompts"][:1, None])[0, -1], -1)
    freq = torch.bincount(got["responses"][:, 0], minlength=8).double() / s["prompts"].shape[0]
    tv = 0.5 * float((freq - probs).abs().sum())
    assert tv < 0.08, (f"generate: the first tokens of 1500 samples are not distributed as "
                       f"softmax(logits) (total variation {tv:.3f}); sample with "
                       f"torch.multinomial(softmax(logits), 1), temperature 1, no argmax")


@pytest.mark.points(2)
@pytest.mark.exercises("sequence_logprobs")
def test_sequence_logprobs(launch, impl):
    got, s = _got(launch, impl, "seqlp")
    want = _ref.response_logprobs(s["state"], s["prompts"], s["responses"])
    assert_close(got["out"], want, dtype=F32, what="sequence_logprobs",
                 hint="position t of the output on cat(prompt, responses[:, :-1]) scores "
                      "response token t")
    assert got["has_graph"], "sequence_logprobs: the result must carry autograd history when " \
        "grad is enabled (the PPO update differentiates it); do not detach it"
    assert not got["frozen_graph"], "sequence_logprobs under torch.no_grad() built a graph"


# ---- make_experience ------------------------------------------------------------------------


@pytest.mark.parametrize("adv", [pytest.param("grpo", id="advantage=grpo"),
                                 pytest.param("gae", id="advantage=gae")])
@pytest.mark.points(2)
@pytest.mark.exercises("make_experience")
def test_make_experience_consistent(launch, impl, adv):
    got, s = _got(launch, impl, f"experience/{adv}")
    what = f"make_experience (advantage={adv})"
    cfg = s["cfg"]
    assert not got["requires_grad"], f"{what}: no tensor of the Experience may require grad"
    assert got["version"] == s["version"], f"{what}: version {got['version']}, passed " \
        f"{s['version']}"
    prompts, resp = got["prompts"], got["responses"]
    assert isinstance(resp, torch.Tensor) and tuple(resp.shape) == (12, 3), \
        f"{what}: responses must be [B, response_len]"
    assert torch.equal(prompts, s["prompts"]), f"{what}: exp.prompts must be the prompts passed"
    assert bool(got["mask"].all()), f"{what}: the toy's mask is all True"
    old = _ref.response_logprobs(s["actor"], prompts, resp)
    ref = _ref.response_logprobs(s["frozen"], prompts, resp)
    assert_close(got["old_logprobs"], old, dtype=F32, what=f"{what} old_logprobs",
                 hint="the actor's log-probs of the sampled tokens")
    assert_close(got["ref_logprobs"], ref, dtype=F32, what=f"{what} ref_logprobs",
                 hint="the reference's log-probs of the same tokens")
    scores = _ref.reward(prompts, resp, cfg["vocab"])
    assert_close(got["scores"], scores, dtype=F32, what=f"{what} scores",
                 hint="toy_reward(prompts, responses, vocab)")
    mask = torch.ones_like(resp, dtype=torch.bool)
    rewards = _ref.kl_rewards(old, ref, scores, mask, cfg["kl_coef"])
    assert_close(got["rewards"], rewards, dtype=F32, what=f"{what} rewards",
                 hint="kl_penalized_rewards(old_logprobs, ref_logprobs, scores, mask, kl_coef)")
    if adv == "grpo":
        want = _ref.grpo(rewards.sum(1), cfg["group_size"], 1e-6)[:, None].expand(-1, 3)
        assert got["values"] is None and got["returns"] is None, \
            f"{what}: values and returns are None for grpo"
        assert_close(got["advantages"], want, dtype=F32, what=f"{what} advantages",
                     hint="grpo_advantages(rewards.sum(1), group_size) on every token")
        return
    values = _ref.critic_values(s["critic"], _ref.inputs_of(prompts, resp))
    assert_close(got["values"], values, dtype=F32, what=f"{what} values",
                 hint="critic(cat(prompts[:, None], responses[:, :-1]))")
    a, r = _ref.gae(rewards, values, mask, cfg["gamma"], cfg["lam"])
    assert_close(got["advantages"], a, dtype=F32, what=f"{what} advantages", hint=GAE_HINT)
    assert_close(got["returns"], r, dtype=F32, what=f"{what} returns", hint="A_t + V_t")
