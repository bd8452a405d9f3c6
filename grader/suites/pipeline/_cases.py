"""The train_step cases of the pipeline hidden suite and the launches that run them.

A `TrainCase` is one train_step call on every rank; `make_data` draws its weights and batch
(the inputs, the same in the parent's reference); `train_runs` runs every case of one number
of stages in one launch (sidecar transport, point-to-point only), memoised per implementation,
and `train_values` reads one case back. A case that hangs costs only itself: the launch is made
again without it (`harness.cases.launch_cases`), and judging it raises its RankTimeout, whose
first line `explain` (the provided checks, shared with the public test) completes with the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from assignments.pipeline._provided_checks import P2P_ONLY, explain
from grader.seeds import seeded_generator
from grader.suites.pipeline._ranks import TRAIN_ERRORS, rank_train
from harness.cases import Memo, case_values, launch_cases

DTYPE = torch.float64
BACKEND = "gloo"
TRANSPORT = "sidecar"  # the wire log that decides order and bytes is kept outside the rank
TIMEOUT_S = 90.0  # a wall-clock limit for a loop that spins; a deadlock is found by the stall
# watch (every rank asleep), and a hung case is left out of the launch made again
LR = 0.1
SEND_OPS = ("send", "isend")
RECV_OPS = ("recv", "irecv")


def where(s: int, p: int) -> str:
    return f"[stage {s} of {p}]"


@dataclass(frozen=True)
class TrainCase:
    """One train_step call on every rank: the model's layers are Linear(width, width) + tanh;
    `layers[s]` of them on stage s; a batch of `rows` rows cut into `m` micro-batches."""

    kind: str
    m: int
    layers: tuple[int, ...]
    width: int = 4
    rows: int = 8
    seed: int = 0
    float32: bool = False  # a float32 model, train_step called without `dtype` (its default)

    @property
    def p(self) -> int:
        return len(self.layers)

    @property
    def name(self) -> str:
        return (f"{self.kind}-m={self.m}-layers={'+'.join(map(str, self.layers))}"
                f"{'-float32-default-dtype' if self.float32 else ''}")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.float32 else DTYPE

    @property
    def itemsize(self) -> int:
        return 4 if self.float32 else 8


def make_data(case: TrainCase) -> dict[str, Any]:
    """Weights of every layer, the batch and the targets, drawn from the case's seed."""
    gen = seeded_generator(1000 + case.seed)
    n = sum(case.layers)
    weights = [torch.randn(case.width, case.width, generator=gen, dtype=DTYPE) * 0.7
               for _ in range(n)]
    biases = [torch.randn(case.width, generator=gen, dtype=DTYPE) * 0.1 for _ in range(n)]
    batch = torch.randn(case.rows, case.width, generator=gen, dtype=DTYPE)
    targets = torch.randn(case.rows, case.width, generator=gen, dtype=DTYPE)
    data: dict[str, Any] = {"weights": weights, "biases": biases, "batch": batch,
                            "targets": targets}
    if case.float32:  # values a float32 rank holds exactly; the reference stays float64
        data = {k: ([t.float().double() for t in v] if isinstance(v, list) else v.float().double())
                for k, v in data.items()}
    return data


TRAIN = Memo(explain=explain)


def train_runs(launch: Callable[..., Any], impl: Any, cases: Sequence[TrainCase]) -> Any:
    """One launch (sidecar transport, point-to-point only) for cases of the same p, memoised
    per implementation (`impl`, the session's --impl); the 2-stage one runs the bad-argument
    cases first. A case that hangs costs only itself: the launch is made again without it
    (`harness.cases.launch_cases`), and judging it raises its RankTimeout."""
    key = (impl, tuple(cases))
    p = cases[0].p
    names = [*(TRAIN_ERRORS if p == 2 else ()), *(c.name for c in cases)]
    return TRAIN.get(key, lambda: launch_cases(lambda env: launch(
        rank_train, p, args=([{**asdict(c), "name": c.name} for c in cases],
                             [make_data(c) for c in cases], p == 2),
        backend=BACKEND, transport=TRANSPORT, forbid=P2P_ONLY, timeout=TIMEOUT_S, env=env),
        names))


def train_values(result: Any, name: str, what: str) -> list[Any]:
    """`case_values` of one train_step case, a hang's or a used graph's error explained."""
    try:
        return case_values(result.values, name, what)
    except AssertionError as exc:
        raise explain(exc) from None

