"""compute_gae: the λ limits, termination, truncation, several environments, a rollout of one
step, and the default gamma and lam."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ppo._cases import F64, probe, run_probes
from grader.suites.ppo._ref import close, result, said

F32 = torch.float32
GARBAGE_VALUE = 50.0  # next_values at terminated steps: must never be used


def rollout(seed: int, steps: int, envs: int) -> dict[str, torch.Tensor]:
    """Random float32 rewards, values and next values of shape [steps, envs], no episode end."""
    gen = seeded_generator(seed)
    return {
        "rewards": torch.randn(steps, envs, generator=gen).to(F32),
        "values": torch.randn(steps, envs, generator=gen).to(F32),
        "terminated": torch.zeros(steps, envs, dtype=torch.bool),
        "truncated": torch.zeros(steps, envs, dtype=torch.bool),
        "next_values": torch.randn(steps, envs, generator=gen).to(F32),
    }


def with_ends(data: dict[str, torch.Tensor], terminated: Sequence[tuple[int, int]] = (),
              truncated: Sequence[tuple[int, int]] = ()) -> dict[str, torch.Tensor]:
    """Mark (step, env) pairs as terminated (garbage next value) or truncated."""
    data = {k: v.clone() for k, v in data.items()}
    for t, e in terminated:
        data["terminated"][t, e] = True
        data["next_values"][t, e] = GARBAGE_VALUE
    for t, e in truncated:
        data["truncated"][t, e] = True
    return data


def chained(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """next_values[t] = values[t+1] within the rollout, as a real critic would give them."""
    data = {k: v.clone() for k, v in data.items()}
    data["next_values"][:-1] = data["values"][1:]
    return data


def mixed(seed: int) -> dict[str, torch.Tensor]:
    """16 steps of 5 envs with random terminations and truncations (never both at once)."""
    data = rollout(seed, 16, 5)
    gen = seeded_generator(seed + 1)
    ends = torch.rand(16, 5, generator=gen)
    data["terminated"] = ends < 0.15
    data["truncated"] = (ends >= 0.15) & (ends < 0.25)
    data["next_values"] = torch.where(data["terminated"], GARBAGE_VALUE, data["next_values"])
    return data


def reference(data: dict[str, torch.Tensor], gamma: float, lam: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE one scalar at a time, in float64, straight from the definition (README §4)."""
    r, v, nv = (data[k].to(F64) for k in ("rewards", "values", "next_values"))
    term, trunc = data["terminated"].bool(), data["truncated"].bool()
    steps, envs = r.shape
    adv = torch.zeros(steps, envs, dtype=F64)
    for e in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            bootstrap = 0.0 if term[t, e] else float(nv[t, e])
            delta = float(r[t, e]) + gamma * bootstrap - float(v[t, e])
            ended = bool(term[t, e] or trunc[t, e])
            running = delta if ended else delta + gamma * lam * running
            adv[t, e] = running
    return adv, adv + v


def slipped(data: dict[str, torch.Tensor], gamma: float, lam: float, *,
            ignore_termination: bool = False, truncation_bootstraps_zero: bool = False,
            truncation_keeps_going: bool = False, next_step_flags: bool = False
            ) -> torch.Tensor:
    """The advantages of GAE with one known mistake (to name it when a result matches)."""
    r, v, nv = (data[k].to(F64) for k in ("rewards", "values", "next_values"))
    term, trunc = data["terminated"].bool(), data["truncated"].bool()
    if ignore_termination:
        term = torch.zeros_like(term)
    steps, envs = r.shape
    adv = torch.zeros(steps, envs, dtype=F64)
    for e in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            zero_bootstrap = term[t, e] or (truncation_bootstraps_zero and trunc[t, e])
            delta = float(r[t, e]) + gamma * (0.0 if zero_bootstrap else float(nv[t, e])) \
                - float(v[t, e])
            flag = t + 1 if next_step_flags else t
            ended = flag < steps and bool(term[flag, e] or
                                          (trunc[flag, e] and not truncation_keeps_going))
            running = delta if ended else delta + gamma * lam * running
            adv[t, e] = running
    return adv


def slips(data: dict[str, torch.Tensor], gamma: float, lam: float
          ) -> list[tuple[torch.Tensor, str]]:
    """(advantages, what to say) of each known mistake that changes the result on `data`."""
    right = reference(data, gamma, lam)[0]
    out = [
        (slipped(data, gamma, lam, ignore_termination=True), said(
            hint="a terminated step bootstraps 0: ignore next_values[t] where terminated[t], "
                 "and cut the recursion there (README §4)")),
        (slipped(data, gamma, lam, next_step_flags=True), said(
            hint="cut the recursion with the flags of step t itself (terminated[t] | "
                 "truncated[t]), not those of step t+1: here a flag marks the step that ended "
                 "an episode (README §4)")),
        (slipped(data, gamma, lam, truncation_bootstraps_zero=True), said(
            hint="a truncated step bootstraps gamma * next_values[t] (the final observation's "
                 "value), not 0: only termination bootstraps 0 (README §4)")),
        (slipped(data, gamma, lam, truncation_keeps_going=True), said(
            hint="a truncated step still cuts the recursion (the next row is a new episode), "
                 "though it bootstraps next_values[t] (README §4)")),
    ]
    return [(adv, message) for adv, message in out if not torch.allclose(adv, right)]


def where_wrong(data: dict[str, torch.Tensor], got: object, expected: torch.Tensor) -> str:
    """"first wrong at step t of env e (the flags there)", for a hint's end."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return ""
    wrong = ((got.to(F64) - expected).abs() > 1e-4 * (1 + expected.abs())).nonzero()
    if not len(wrong):
        return ""
    t, e = (int(i) for i in wrong[-1])  # the recursion runs backwards: the latest step first
    flags = [name for name in ("terminated", "truncated") if bool(data[name][t, e])]
    return (f"; the latest wrong step is t={t} of env {e} "
            f"({' and '.join(flags) + ' there' if flags else 'no episode end there'})")


def gae_probe(data: dict[str, torch.Tensor], gamma: float, lam: float) -> dict:
    """The call; gamma and lam left out where they are the signature's defaults."""
    given: dict[str, Any] = {} if (gamma, lam) == DEFAULTS else {"gamma": gamma, "lam": lam}
    return probe("compute_gae", data["rewards"], data["values"], data["terminated"],
                 data["truncated"], data["next_values"], **given)


DEFAULTS = (0.99, 0.95)  # compute_gae's gamma and lam when not given


CASES = {
    "lambda0": (rollout(21, 6, 3), 0.9, 0.0),
    "lambda1": (with_ends(chained(rollout(22, 7, 2)), terminated=[(6, 0), (6, 1)]), 0.9, 1.0),
    "mid_termination": (with_ends(rollout(23, 8, 3), terminated=[(3, 0), (5, 1), (0, 2)]),
                        0.95, 0.9),
    "last_termination": (with_ends(rollout(24, 5, 2), terminated=[(4, 0)]), *DEFAULTS),
    "truncation": (with_ends(rollout(25, 8, 3), truncated=[(2, 0), (7, 1)],
                             terminated=[(4, 2)]), 0.95, 0.9),
    "mixed": (mixed(26), 0.97, 0.9),
    "one_step": (with_ends(rollout(27, 1, 3), truncated=[(0, 1)], terminated=[(0, 2)]), 0.9,
                 0.8),
}


def build() -> dict[str, dict]:
    probes = {key: gae_probe(data, gamma, lam) for key, (data, gamma, lam) in CASES.items()}
    data, gamma, lam = CASES["mixed"]
    as_floats = {**data, "terminated": data["terminated"].to(F32),
                 "truncated": data["truncated"].to(F32)}
    probes["mixed_float_flags"] = gae_probe(as_floats, gamma, lam)
    return probes


@pytest.fixture(scope="module")
def probes(launch):
    return run_probes(launch, build())


def pair(probes: dict, key: str) -> tuple:
    """(advantages, returns) of a probe, or an AssertionError saying what came back."""
    got = result(probes, key, "compute_gae")["result"]
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        raise AssertionError(f"compute_gae returned {type(got).__name__}; expected the tuple "
                             f"(advantages, returns)")
    return got[0], got[1]


def check(probes: dict, key: str, situation: str, hint: str, returns: bool = False) -> None:
    data, gamma, lam = CASES[key.removesuffix("_float_flags")]
    got = pair(probes, key)
    advantages, expected_returns = reference(data, gamma, lam)
    close(got[0], advantages, f"compute_gae advantages {situation}",
          hint + where_wrong(data, got[0], advantages), scale=10.0,
          slips=slips(data, gamma, lam))
    if returns:
        close(got[1], expected_returns, f"compute_gae returns {situation}",
              "returns = advantages + values", scale=10.0)


@pytest.mark.points(3)
@pytest.mark.exercises("compute_gae")
def test_lambda_zero_is_the_td_error(probes):
    data, gamma, _ = CASES["lambda0"]
    td = data["rewards"].to(F64) + gamma * data["next_values"].to(F64) - data["values"].to(F64)
    advantages, _ = pair(probes, "lambda0")
    # Bootstrapping from the next row of the rollout, values[t+1] (CleanRL's loop), instead of
    # the documented next_values[t]; the last step has no next row, so it may be anything.
    from_values = td.clone()
    from_values[:-1] = (data["rewards"][:-1].to(F64) + gamma * data["values"][1:].to(F64)
                        - data["values"][:-1].to(F64))
    if isinstance(advantages, torch.Tensor) and advantages.shape == td.shape:
        from_values[-1] = advantages[-1].to(F64)
    close(advantages, td, "compute_gae advantages with lam=0",
          "with lam=0, A_t is the one-step TD error r_t + gamma*next_values[t] - values[t] "
          "(README §4)",
          slips=[(from_values, said(
              hint="V(s_t+1) is next_values[t], not values[t+1]: the next row of the rollout "
                   "may be another episode's first state, so bootstrap from next_values[t] at "
                   "every step (README §4)"))])


@pytest.mark.points(3)
@pytest.mark.exercises("compute_gae")
def test_lambda_one_is_the_discounted_return(probes):
    data, gamma, _ = CASES["lambda1"]
    r = data["rewards"].to(F64)
    discounted = torch.zeros_like(r)
    running = torch.zeros(r.shape[1], dtype=F64)
    for t in reversed(range(r.shape[0])):
        running = r[t] + gamma * running
        discounted[t] = running
    got = pair(probes, "lambda1")
    hint = said(
        hint="with lam=1 and an episode that terminates, A_t + V(s_t) is the discounted return")
    known = [(adv + data["values"].to(F64), message) for adv, message in slips(data, gamma, 1.0)]
    close(got[1], discounted, "compute_gae returns with lam=1 (Monte Carlo)", hint, scale=10.0,
          slips=known)
    close(got[0], discounted - data["values"].to(F64), "compute_gae advantages with lam=1",
          hint, scale=10.0)


@pytest.mark.points(4)
@pytest.mark.exercises("compute_gae")
def test_termination_in_the_middle(probes):
    check(probes, "mid_termination", "with terminations in the middle of the rollout",
          "a terminated step bootstraps 0 (ignore next_values there) and cuts the recursion "
          "with its own flag, terminated[t], not terminated[t+1] (README §4)", returns=True)


@pytest.mark.points(2)
@pytest.mark.exercises("compute_gae")
def test_termination_at_the_last_step(probes):
    check(probes, "last_termination", "with a termination at the last step (gamma and lam "
          "left at their defaults, 0.99 and 0.95)",
          "a terminated last step bootstraps 0, not next_values (README §4)")


@pytest.mark.points(4)
@pytest.mark.exercises("compute_gae")
def test_truncation_bootstraps(probes):
    check(probes, "truncation", "with time-limit truncations",
          "a truncated step bootstraps gamma * next_values[t] (the final observation's value) "
          "but still cuts the recursion; only termination bootstraps 0 (README §4)", returns=True)


@pytest.mark.points(2)
@pytest.mark.exercises("compute_gae")
def test_several_envs_and_flag_dtypes(probes):
    check(probes, "mixed", "over 5 envs with random terminations and truncations",
          "each env (column) runs its own recursion backwards, cut where that env's episode "
          "ended", returns=True)
    check(probes, "mixed_float_flags", "with 0/1 float flags (right with bool flags)",
          "flags may be 0/1 floats: turn them into bools with .bool() (or use 1 - flag) "
          "before combining them", returns=True)
    check(probes, "one_step", "of a rollout of one step (T = 1) over 3 envs",
          "with T = 1 there is no A_{t+1}: A_0 = delta_0", returns=True)
