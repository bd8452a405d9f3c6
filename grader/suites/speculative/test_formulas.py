"""acceptance_rate and expected_tokens_per_step: the closed forms of README §5, against plain
float64 sums here (the series summed term by term, sum min(p, q) over the vocabulary)."""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.speculative._cases import F64, call, raises, run_tasks, value

SERIES = [(alpha, k) for alpha in (0.0, 0.3, 0.6, 0.8, 0.9, 0.999, 1.0) for k in range(9)]
BAD = {"alpha=-0.1": (-0.1, 2), "alpha=1.5": (1.5, 2), "k=-1": (0.5, -1)}


def distributions(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    logits = 2 * torch.randn(*shape, generator=seeded_generator(seed), dtype=F64)
    return torch.softmax(logits, dim=-1)


Q_BATCH, P_BATCH = distributions(301, (3, 2, 7)), distributions(302, (3, 2, 7))
Q_ONE, P_ONE = distributions(303, (11,)), distributions(304, (11,))


def build() -> dict[str, dict]:
    tasks = {f"series_{alpha}_{k}": call("speculative", "expected_tokens_per_step", alpha, k)
             for alpha, k in SERIES}
    tasks.update({f"bad_{name}": raises("speculative", "expected_tokens_per_step", *args)
                  for name, args in BAD.items()})
    tasks["alpha_batch"] = call("speculative", "acceptance_rate", Q_BATCH, P_BATCH)
    tasks["alpha_one"] = call("speculative", "acceptance_rate", Q_ONE, P_ONE)
    tasks["alpha_same"] = call("speculative", "acceptance_rate", Q_ONE, Q_ONE)
    return tasks


@pytest.fixture(scope="module")
def outcomes(launch):
    return run_tasks(launch, build())


@pytest.mark.points(3)
@pytest.mark.exercises("expected_tokens_per_step")
def test_expected_tokens_is_the_geometric_series(outcomes):
    for alpha, k in SERIES:
        got = value(outcomes, f"series_{alpha}_{k}", "expected_tokens_per_step")
        want = sum(alpha ** i for i in range(k + 1))
        assert isinstance(got, (int, float)) and abs(float(got) - want) <= 1e-9 * want, (
            f"expected_tokens_per_step(alpha={alpha}, k={k}) = {got!r:.12}, expected "
            f"{want:.12g} = 1 + alpha + ... + alpha**k = (1 - alpha**(k+1)) / (1 - alpha), "
            f"and k + 1 at alpha = 1")


@pytest.mark.points(1)
@pytest.mark.exercises("expected_tokens_per_step")
def test_expected_tokens_rejects_alpha_outside_0_1_and_negative_k(outcomes):
    for name in BAD:
        got = value(outcomes, f"bad_{name}", "expected_tokens_per_step")
        assert got == "ValueError", (
            f"expected_tokens_per_step with {name}: expected ValueError, got {got}")


@pytest.mark.points(2)
@pytest.mark.exercises("acceptance_rate")
def test_acceptance_rate_is_the_overlap_sum_min_p_q(outcomes):
    cases = {"alpha_batch": (Q_BATCH, P_BATCH, "[3, 2, 7] rows"),
             "alpha_one": (Q_ONE, P_ONE, "1-D rows"), "alpha_same": (Q_ONE, Q_ONE, "p = q")}
    for name, (q, p, what) in cases.items():
        got = value(outcomes, name, "acceptance_rate")
        want = torch.minimum(q, p).sum(dim=-1)
        assert_close(got, want, what=f"acceptance_rate on {what}", dtype=F64,
                     hint="alpha = sum over the last dimension of min(p, q), one value per row",
                     hint_first=True)
