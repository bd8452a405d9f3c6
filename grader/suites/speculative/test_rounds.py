"""speculative_generate: greedy equality with the target, the rounds' statistics, one target
forward per round, k = 0, the sampled distribution, the measured acceptance, bad arguments.

At temperature 0 everything is deterministic: the parent follows the rounds of README §5 with
fresh provided models fed whole sequences (no cache), which gives the tokens and the exact
stats; a cache that keeps a rejected draft token changes the tokens (target) or the accepted
count (draft). Sampled runs are judged by total variation against the target's exact
distribution over every continuation (bound in `_common`): speculative sampling must not change
it, whatever the draft. With constant models every examined draft is accepted independently
with probability alpha = sum min(p, q), so accepted / (accepted + rejected) estimates alpha.
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.suites.speculative._cases import F64, constant, raises, run_tasks, seed, tiny, value
from grader.suites.speculative._ref import (
    FAILURE_PROBABILITY,
    greedy_rounds,
    judge_distribution,
    sequence_distribution,
    tokens_list,
)

NEW = 16
GREEDY = {  # name: (target, draft, prompt, k)
    "close_draft_k2": (tiny(5, 11), tiny(5, 11, noise=0.5, noise_seed=111), [1, 2], 2),
    "close_draft_k4": (tiny(5, 12), tiny(5, 12, noise=0.5, noise_seed=112), [3], 4),
    "close_draft_k1_long_prompt": (tiny(5, 13), tiny(5, 13, noise=0.5, noise_seed=113),
                                   [0, 4, 4, 1], 1),
    "unrelated_draft_k3": (tiny(5, 14), tiny(5, 64), [2, 2], 3),
}
PLAIN = (tiny(5, 15), tiny(5, 15, noise=0.5, noise_seed=115), [4, 0], 0)
DIRTY = "close_draft_k2"  # run again on models whose caches already hold 6 tokens

SAMPLED = (tiny(4, 21, scale=1.5), tiny(4, 21, scale=1.5, noise=0.7, noise_seed=22), [1, 3])
SAMPLED_NEW, SAMPLED_K, SAMPLED_TRIALS = 3, 2, 1500
PLAIN_TRIALS = 600

P_LOGITS, Q_LOGITS = [1.0, 0.2, -0.5, 0.3], [0.2, 1.0, 0.0, -0.3]
ALPHA_NEW, ALPHA_K = 1500, 3


def generate(target, draft, prompt, k, new, temperature, base, trials=None) -> dict:
    task = {"kind": "generate" if trials is None else "generate_trials", "target": target,
            "draft": draft, "prompt": prompt, "k": k, "max_new_tokens": new,
            "temperature": temperature, "seed": seed(base)}
    return task if trials is None else {**task, "trials": trials}


def build() -> dict[str, dict]:
    tasks = {name: generate(t, d, prompt, k, NEW, 0.0, 201)
             for name, (t, d, prompt, k) in GREEDY.items()}
    tasks["plain_greedy"] = generate(*PLAIN, NEW, 0.0, 202)
    target, draft, prompt, k = GREEDY[DIRTY]
    tasks["dirty"] = {**generate(target, draft, prompt, k, NEW, 0.0, 207),
                      "prefill": [4, 3, 2, 1, 0, 1]}
    tasks["sampled"] = generate(*SAMPLED, SAMPLED_K, SAMPLED_NEW, 1.0, 203, SAMPLED_TRIALS)
    tasks["plain_sampled"] = generate(*SAMPLED, 0, SAMPLED_NEW, 1.0, 204, PLAIN_TRIALS)
    tasks["alpha"] = generate(constant(P_LOGITS), constant(Q_LOGITS), [0], ALPHA_K, ALPHA_NEW,
                              1.0, 205)
    tasks["zero_new"] = generate(*PLAIN[:3], 2, 0, 1.0, 206)
    t, d = PLAIN[0], PLAIN[1]
    bad = {"negative_k": (t, d, torch.tensor([1]), -1, 4),
           "negative_max_new_tokens": (t, d, torch.tensor([1]), 2, -1),
           "empty_prompt": (t, d, torch.zeros(0, dtype=torch.long), 2, 4),
           "vocab_mismatch": (t, tiny(4, 3), torch.tensor([1]), 2, 4)}
    for name, (target, draft, prompt, k, new) in bad.items():
        tasks[f"bad_{name}"] = {**raises("speculative", "speculative_generate", None, None,
                                         prompt, k, new, 1.0, None),
                                "models": (target, draft)}
    return tasks


@pytest.fixture(scope="module")
def outcomes(launch):
    return run_tasks(launch, build())


def run(outcomes: dict, name: str) -> tuple[list[int], dict, int]:
    got = value(outcomes, name, "speculative_generate")
    tokens = tokens_list(got["tokens"], "speculative_generate tokens")
    stats = got["stats"]
    missing = {"rounds", "drafted", "accepted", "rejected"} - set(stats)
    assert not missing, f"speculative_generate stats lack the keys {sorted(missing)}"
    return tokens, stats, int(got["target_calls"])


def expected(name: str) -> tuple[list[int], dict]:
    name = DIRTY if name == "dirty" else name
    target, draft, prompt, k = PLAIN if name == "plain_greedy" else GREEDY[name]
    return greedy_rounds(target, draft, prompt, k, NEW)


@pytest.mark.points(6)
@pytest.mark.exercises("speculative_generate")
def test_greedy_output_is_the_target_greedy_continuation(outcomes):
    for name in GREEDY:
        tokens, _, _ = run(outcomes, name)
        want, _ = expected(name)
        assert len(tokens) == NEW, (
            f"speculative_generate returned {len(tokens)} tokens for max_new_tokens={NEW} "
            f"({name}); it returns exactly max_new_tokens new tokens, without the prompt")
        wrong = next(i for i in range(NEW + 1) if i == NEW or tokens[i] != want[i])
        assert wrong == NEW, (
            f"speculative_generate at temperature 0 ({name}): token {wrong} is "
            f"{tokens[wrong]}, the target's greedy continuation has {want[wrong]}; roll the "
            f"target's cache back so that no rejected draft token stays in it, and take the "
            f"k'+1 target rows of the fed drafts (README §5)")


@pytest.mark.points(3)
@pytest.mark.exercises("speculative_generate")
def test_greedy_rounds_statistics(outcomes):
    for name in GREEDY:
        _, stats, _ = run(outcomes, name)
        _, want = expected(name)
        got = {key: stats[key] for key in want}
        if got["accepted"] < want["accepted"]:
            raise AssertionError(
                f"speculative_generate at temperature 0 ({name}): {got['accepted']} drafts "
                f"accepted, the rounds give {want['accepted']}: the draft proposes from a "
                f"wrong prefix; roll the draft's cache back too, so it holds no rejected token")
        assert got == want, (
            f"speculative_generate at temperature 0 ({name}): stats {got}, the rounds of "
            f"README §5 give {want} (k' = min(k, r - 1) drafts per round; rejected counts "
            f"rounds with n < k')")


@pytest.mark.points(1)
@pytest.mark.exercises("speculative_generate")
def test_caches_are_reset_at_the_start(outcomes):
    tokens, stats, _ = run(outcomes, "dirty")
    want, want_stats = expected("dirty")
    assert tokens == want, (
        f"speculative_generate on models whose caches already held 6 tokens gave {tokens}, "
        f"expected {want}: reset both caches at the start (README §5)")
    assert {key: stats[key] for key in want_stats} == want_stats, (
        f"speculative_generate on models whose caches already held 6 tokens: stats {stats}, "
        f"expected {want_stats}: reset the draft's cache too at the start")


@pytest.mark.points(1)
@pytest.mark.exercises("speculative_generate")
def test_one_target_forward_per_round(outcomes):
    for name in GREEDY:
        _, stats, calls = run(outcomes, name)
        _, want = expected(name)
        assert calls == want["rounds"], (
            f"speculative_generate ({name}) called target.forward {calls} times for "
            f"{want['rounds']} rounds: verify all k' drafts of a round with one target "
            f"forward (prompt included in the first), never one forward per draft")
        assert stats["rounds"] == calls, (
            f"speculative_generate ({name}): stats['rounds'] is {stats['rounds']} but "
            f"target.forward ran {calls} times (once per round)")


@pytest.mark.points(2)
@pytest.mark.exercises("speculative_generate")
def test_k_zero_is_plain_decoding(outcomes):
    tokens, stats, calls = run(outcomes, "plain_greedy")
    want, want_stats = expected("plain_greedy")
    assert tokens == want and calls == NEW, (
        f"speculative_generate with k=0 at temperature 0: got {tokens} with {calls} target "
        f"forwards, expected the target's greedy tokens {want} with one forward per token")
    assert {key: stats[key] for key in want_stats} == want_stats, (
        f"speculative_generate with k=0: stats {stats}, expected {want_stats}")
    rows = value(outcomes, "plain_sampled", "speculative_generate")
    target, _, prompt = SAMPLED
    judge_distribution([tuple(tokens_list(r, "speculative_generate")) for r in rows],
                       sequence_distribution(target, prompt, SAMPLED_NEW, 1.0),
                       "speculative_generate with k=0 at temperature 1",
                       "with k=0 every token is sampled from the target alone")


@pytest.mark.points(5)
@pytest.mark.exercises("speculative_generate")
def test_sampled_output_follows_the_target_distribution(outcomes):
    rows = value(outcomes, "sampled", "speculative_generate")
    target, _, prompt = SAMPLED
    judge_distribution([tuple(tokens_list(r, "speculative_generate")) for r in rows],
                       sequence_distribution(target, prompt, SAMPLED_NEW, 1.0),
                       f"speculative_generate with k={SAMPLED_K} at temperature 1: "
                       f"the {SAMPLED_NEW}-token continuations",
                       "the output must follow the target's distribution: sample drafts from "
                       "the draft rows you pass as q, and keep no rejected token in a cache")


@pytest.mark.points(3)
@pytest.mark.exercises("speculative_generate")
def test_measured_acceptance_matches_alpha(outcomes):
    tokens, stats, _ = run(outcomes, "alpha")
    assert len(tokens) == ALPHA_NEW, f"expected {ALPHA_NEW} tokens, got {len(tokens)}"
    p = torch.softmax(torch.tensor(P_LOGITS, dtype=F64), 0)
    q = torch.softmax(torch.tensor(Q_LOGITS, dtype=F64), 0)
    alpha = float(torch.minimum(p, q).sum())
    examined = stats["accepted"] + stats["rejected"]
    assert examined > 0, f"speculative_generate stats {stats}: no draft token was examined"
    measured = stats["accepted"] / examined
    # Hoeffding over the examined drafts, with a union bound over their possible number.
    limit = math.sqrt(math.log(2 * ALPHA_NEW * ALPHA_K / FAILURE_PROBABILITY) / (2 * examined))
    assert abs(measured - alpha) <= limit, (
        f"speculative_generate with constant models: accepted / (accepted + rejected) = "
        f"{measured:.3f}, alpha = sum min(p, q) = {alpha:.3f} (allowed +-{limit:.3f}); count "
        f"every accepted draft, and one rejection per round that stopped early")


@pytest.mark.points(1)
@pytest.mark.exercises("speculative_generate")
def test_bad_arguments_and_zero_new_tokens(outcomes):
    tokens, stats, calls = run(outcomes, "zero_new")
    assert tokens == [] and calls == 0 and all(stats[key] == 0 for key in stats), (
        f"speculative_generate with max_new_tokens=0 must return no tokens, all stats 0 and "
        f"run no target forward; got {tokens}, {stats}, {calls} forwards")
    for name in ("negative_k", "negative_max_new_tokens", "empty_prompt", "vocab_mismatch"):
        got = value(outcomes, f"bad_{name}", "speculative_generate")
        assert got == "ValueError", (
            f"speculative_generate with {name.replace('_', ' ')}: expected ValueError before any "
            f"forward, got {got}")
