"""rejection_sample: the emitted tokens' structure and distribution, judged per part.

Fixed draft and target rows with fixed draft tokens make the distribution of the result unique
(README §4): the number n of accepted drafts has P(n = j) = prod_{i<j} a_i (1 - a_j) with
a_i = min(1, p_i(x_i) / q_i(x_i)), the token after a rejection at i follows
normalise(max(0, p_i - q_i)), and the bonus token after k acceptances follows p_k. Each part is
judged on its own by total variation (bound in `_common`), over thousands of calls with one
generator; how the implementation draws from it does not matter.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.speculative._cases import F64, run_tasks, seed, value
from grader.suites.speculative._ref import judge_distribution, tokens_list

# k = 3 over V = 5: token 0 is accepted with 0.6, token 1 always (p > q), token 3 with 0.5.
Q = torch.tensor([[0.5, 0.2, 0.1, 0.1, 0.1],
                  [0.1, 0.4, 0.2, 0.2, 0.1],
                  [0.2, 0.2, 0.2, 0.3, 0.1]], dtype=F64)
P = torch.tensor([[0.3, 0.1, 0.3, 0.25, 0.05],
                  [0.1, 0.6, 0.1, 0.1, 0.1],
                  [0.35, 0.05, 0.3, 0.15, 0.15],
                  [0.05, 0.05, 0.1, 0.2, 0.6]], dtype=F64)
DRAFTS = torch.tensor([0, 1, 3])
TRIALS = 4000

P_ONLY = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=F64)  # k = 0: the bonus token alone
ONLY_TRIALS = 2000


def one_hot(rows: list[int], width: int = 5) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(rows), width).to(F64)


GREEDY = {  # (q argmaxes = the drafts, p argmaxes, expected result)
    "greedy_reject_at_2": ([4, 2, 0], [4, 2, 1, 3], [4, 2, 1]),
    "greedy_accept_all": ([1, 1, 3], [1, 1, 3, 0], [1, 1, 3, 0]),
    "greedy_reject_first": ([2, 0], [3, 0, 0], [3]),
}


def rejection_task(q: torch.Tensor, p: torch.Tensor, drafts: torch.Tensor, trials: int,
                   base: int) -> dict:
    return {"kind": "rejection_trials", "q": q, "p": p, "tokens": drafts, "trials": trials,
            "seed": seed(base)}


def build() -> dict[str, dict]:
    tasks = {"main": rejection_task(Q, P, DRAFTS, TRIALS, 101),
             "k0": rejection_task(torch.zeros(0, 4, dtype=F64), P_ONLY,
                                  torch.zeros(0, dtype=torch.long), ONLY_TRIALS, 102)}
    for name, (drafts, targets, _) in GREEDY.items():
        tasks[name] = rejection_task(one_hot(drafts), one_hot(targets), torch.tensor(drafts),
                                     1, 103)
    return tasks


@pytest.fixture(scope="module")
def outcomes(launch):
    return run_tasks(launch, build())


def trials(outcomes: dict, name: str) -> list[list[int]]:
    rows = value(outcomes, name, "rejection_sample")
    return [tokens_list(row, "rejection_sample") for row in rows]


def acceptance() -> list[float]:
    """a_i = min(1, p_i(x_i) / q_i(x_i)) of the main case's drafts."""
    return [min(1.0, float(P[i, t] / Q[i, t])) for i, t in enumerate(DRAFTS.tolist())]


def residual(i: int) -> dict[int, float]:
    r = torch.clamp(P[i] - Q[i], min=0.0)
    return {t: float(v) for t, v in enumerate((r / r.sum()).tolist())}


@pytest.mark.points(3)
@pytest.mark.exercises("rejection_sample")
def test_accepted_draft_prefix_then_exactly_one_more_token(outcomes):
    k, drafts = len(DRAFTS), DRAFTS.tolist()
    for out in trials(outcomes, "main"):
        assert 1 <= len(out) <= k + 1, (
            f"rejection_sample returned {len(out)} tokens with k={k} drafts; it returns the "
            f"n accepted drafts plus exactly one more token (1 to k+1 tokens)")
        n = len(out) - 1
        assert out[:n] == drafts[:n], (
            f"rejection_sample returned {out} for drafts {drafts}: every token but the last "
            f"must be an accepted draft token, in order")
        assert out != drafts[:len(out)], (
            f"rejection_sample returned {out} for drafts {drafts}: only accepted drafts, no "
            f"token after them; always append one more: the residual draw after a rejection, "
            f"or the bonus token from target_probs[k] when all k are accepted")


@pytest.mark.points(5)
@pytest.mark.exercises("rejection_sample")
def test_acceptance_probability_is_min_1_p_over_q(outcomes):
    a = acceptance()
    exact = {}
    reach = 1.0
    for j, a_j in enumerate(a):
        exact[j] = reach * (1 - a_j)
        reach *= a_j
    exact[len(a)] = reach
    judge_distribution([len(out) - 1 for out in trials(outcomes, "main")], exact,
                       "rejection_sample: the number of accepted drafts",
                       "accept draft i with probability min(1, p/q): draw u ~ U[0, 1) and "
                       "accept iff u < p_i(x)/q_i(x), never by comparing p >= q")


@pytest.mark.points(5)
@pytest.mark.exercises("rejection_sample")
def test_token_after_a_rejection_follows_the_residual(outcomes):
    rows = trials(outcomes, "main")
    for i in (0, 2):
        drawn = [out[-1] for out in rows if len(out) - 1 == i]
        judge_distribution(drawn, residual(i),
                           f"rejection_sample: the token drawn after rejecting draft {i}",
                           "after a rejection at i, draw from max(0, p - q) of row i, "
                           "normalised: clamp at 0, then divide by the sum")


@pytest.mark.points(4)
@pytest.mark.exercises("rejection_sample")
def test_bonus_token_follows_the_target_row_after_the_last_draft(outcomes):
    k = len(DRAFTS)
    bonus = [out[-1] for out in trials(outcomes, "main") if len(out) == k + 1]
    judge_distribution(bonus, {t: float(v) for t, v in enumerate(P[k].tolist())},
                       "rejection_sample: the bonus token after all k drafts were accepted",
                       "draw the bonus token from target_probs[k], the target's row after the "
                       "last draft (not a draft row, not target_probs[k-1])")


@pytest.mark.points(2)
@pytest.mark.exercises("rejection_sample")
def test_k_zero_draws_one_token_from_the_target(outcomes):
    rows = trials(outcomes, "k0")
    assert all(len(out) == 1 for out in rows), (
        "rejection_sample with k=0 drafts must return exactly one token, drawn from "
        "target_probs[0]")
    judge_distribution([out[0] for out in rows],
                       {t: float(v) for t, v in enumerate(P_ONLY[0].tolist())},
                       "rejection_sample with k=0", "with no drafts, the one token is the "
                       "bonus token, drawn from target_probs[0]")


@pytest.mark.points(1)
@pytest.mark.exercises("rejection_sample")
def test_one_hot_rows_give_the_greedy_result(outcomes):
    for name, (drafts, targets, expected) in GREEDY.items():
        got = trials(outcomes, name)[0]
        assert got == expected, (
            f"rejection_sample with one-hot rows (temperature 0), drafts {drafts}, target "
            f"argmaxes {targets}: got {got}, expected {expected} (drafts up to the first one "
            f"that is not the target's argmax, then the target's argmax)")
