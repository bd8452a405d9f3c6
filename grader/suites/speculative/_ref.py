"""References of the speculative suite, computed in the parent, and the statistics that judge
sampled outputs.

References are computed here, independently of any solution: next-token distributions by
feeding the whole sequence to a fresh provided model (no cache, no rollback), exact sequence
probabilities by enumeration, the target's greedy continuation step by step, and the
speculative rounds' statistics at temperature 0 by following the contract with those.

Sampled outputs are judged by the total-variation distance between the empirical distribution
of n independent outcomes and the exact one. With probabilities pi, E[TV] <= 1/2 sum
sqrt(pi (1 - pi) / n) (Jensen), and TV changes by at most 1/n when one outcome changes, so
P(TV > E[TV] + t) <= exp(-2 n t^2) (McDiarmid). `tv_bound` adds t for a failure probability of
1e-9 per test: a correct implementation fails with negligible probability, for every seed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import torch

from grader.suites.speculative._cases import ModelSpec

FAILURE_PROBABILITY = 1e-9


def build(spec: ModelSpec) -> Any:
    from assignments.speculative.lm import ConstantLM, TinyLM

    kind, arg = spec
    return TinyLM(**arg) if kind == "tiny" else ConstantLM(arg)


def next_probs(spec: ModelSpec, seq: Sequence[int], temperature: float) -> torch.Tensor:
    """The model's next-token distribution after `seq`, from a fresh model fed all of it."""
    from assignments.speculative.lm import next_token_probs

    model = build(spec)
    logits = model.forward(torch.tensor(list(seq), dtype=torch.long))[-1]
    return next_token_probs(logits, temperature)


def greedy(spec: ModelSpec, seq: Sequence[int]) -> int:
    return int(torch.argmax(next_probs(spec, seq, 0.0)))


def sequence_distribution(spec: ModelSpec, prompt: Sequence[int], length: int,
                          temperature: float) -> dict[tuple[int, ...], float]:
    """Exact probability of every continuation of `length` tokens (pruning zeros)."""
    out: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        grown: dict[tuple[int, ...], float] = {}
        for cont, mass in out.items():
            probs = next_probs(spec, [*prompt, *cont], temperature)
            for token, p in enumerate(probs.tolist()):
                if p > 0:
                    grown[cont + (token,)] = mass * p
        out = grown
    return out


def greedy_rounds(target: ModelSpec, draft: ModelSpec, prompt: Sequence[int], k: int,
                  max_new_tokens: int) -> tuple[list[int], dict[str, int]]:
    """The rounds of README §5 at temperature 0, step by step from fresh models: the tokens
    and the stats a correct speculative_generate returns."""
    seq, new = list(prompt), list[int]()
    stats = {"rounds": 0, "drafted": 0, "accepted": 0, "rejected": 0}
    while len(new) < max_new_tokens:
        k_round = min(k, max_new_tokens - len(new) - 1)
        drafts: list[int] = []
        for _ in range(k_round):
            drafts.append(greedy(draft, seq + drafts))
        n = 0
        while n < k_round and greedy(target, seq + drafts[:n]) == drafts[n]:
            n += 1
        emitted = drafts[:n] + [greedy(target, seq + drafts[:n])]
        seq += emitted
        new += emitted
        stats["rounds"] += 1
        stats["drafted"] += k_round
        stats["accepted"] += n
        stats["rejected"] += int(n < k_round)
    return new, stats


# ---- statistics -------------------------------------------------------------------------------

def tv_bound(probs: Iterable[float], n: int) -> float:
    """E[TV] bound plus the McDiarmid term for FAILURE_PROBABILITY (see the module doc)."""
    spread = 0.5 * sum(math.sqrt(p * (1 - p) / n) for p in probs)
    return spread + math.sqrt(math.log(1 / FAILURE_PROBABILITY) / (2 * n))


def empirical(outcomes: Iterable[Hashable]) -> dict[Hashable, float]:
    counts = Counter(outcomes)
    total = sum(counts.values())
    return {key: c / total for key, c in counts.items()}


def tv(observed: Mapping[Hashable, float], exact: Mapping[Hashable, float]) -> float:
    keys = set(observed) | set(exact)
    return 0.5 * sum(abs(observed.get(key, 0.0) - exact.get(key, 0.0)) for key in keys)


def judge_distribution(outcomes: Sequence[Hashable], exact: Mapping[Hashable, float],
                       what: str, hint: str) -> None:
    """Fail if an impossible outcome occurred, or if TV exceeds `tv_bound`."""
    impossible = [o for o in outcomes if exact.get(o, 0.0) == 0.0]
    if impossible:
        raise AssertionError(f"{what}: {hint} -- the outcome {impossible[0]} has probability 0 "
                             f"and occurred {len(impossible)} of {len(outcomes)} times")
    distance = tv(empirical(outcomes), exact)
    limit = tv_bound(exact.values(), len(outcomes))
    assert distance <= limit, (
        f"{what}: {hint} -- total-variation distance {distance:.3f} from the exact "
        f"distribution over {len(outcomes)} trials, allowed {limit:.3f}")


def tokens_list(got: Any, what: str) -> list[int]:
    if not isinstance(got, list) or not all(isinstance(t, int) for t in got):
        raise AssertionError(f"{what}: expected a 1-D long tensor of token ids, got {got!r:.80}")
    return got
