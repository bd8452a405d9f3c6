"""The launches of the fsdp hidden suite, their inputs and the reading of their cases.

Launches (each shared through `MEMO` by every module that reads it):
  "zero3"    4 ranks, sidecar: Zero3 with resharding (SGD + momentum) and without (AdamW),
             memory probes in every leaf forward, a mark per phase for the wire log;
  "basics"   1 rank: flatten_pad values and the ValueErrors of flatten_pad and Zero3
             (test_basics);
  "fsdp2"    4 ranks, sidecar: one training step per strategy, mesh errors
             (test_fsdp2_strategies);
  "ckpt4"    4 ranks, in-rank: mixed precision cases, then AdamW training with a DCP save after
             2 steps and 2 more steps (the sidecar does not carry DCP's gathers, nor bf16 sums);
  "ckpt2"    2 ranks, in-rank: load "ckpt4"'s checkpoint, compare, train the same 2 steps.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.seeds import seeded_generator, shifted
from grader.suites.fsdp._ranks import IN, LATER, OUT, Z3_CONFIGS, D, rank_zero3
from grader.suites.fsdp._ranks_checkpoint import ADAMW, STEPS, rank_ckpt2, rank_ckpt4
from grader.suites.fsdp._ref import f2_reference, z3_reference
from harness import Forbid
from harness.cases import Memo, case_value, launch_cases

LAUNCH_TIMEOUT = 180.0
# No shorter limit after a hang: a deadlock is found by the stall watch in seconds, and a
# shortened wall clock could end a correct launch on a loaded machine.
MEMO = Memo()

# -- Part 1: ZeRO-3 ------------------------------------------------------------------------
Z3_WORLD = 4
Z3_BATCH = 3  # rows per rank
Z3_STEPS = 3
Z3_SEED = 11
Z3_ALLOWED = frozenset({"all_gather", "all_gather_into_tensor", "all_gather_single",
                        "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"})


def z3_forbid() -> Forbid:
    return Forbid(allow_only=Z3_ALLOWED,
                  rule="ZeRO-3 communicates with all-gathers and reduce-scatters only")


def z3_data(world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(Z3_SEED + 1)
    rows = world_size * Z3_BATCH
    x = torch.randn(Z3_STEPS, rows, D, generator=gen, dtype=torch.float64)
    y = torch.randn(Z3_STEPS, rows, D, generator=gen, dtype=torch.float64)
    return x, y


def per_rank(x: torch.Tensor, y: torch.Tensor, world_size: int) -> list[tuple]:
    b = x.shape[1] // world_size
    return [(x[:, r * b:(r + 1) * b].clone(), y[:, r * b:(r + 1) * b].clone())
            for r in range(world_size)]


def launch_zero3(launch: Any, impl: Any) -> Any:
    """The "zero3" launch; a case that hangs or ends the launch costs only itself
    (`harness.cases.launch_cases`)."""
    def make() -> Any:
        x, y = z3_data(Z3_WORLD)
        seed = shifted(Z3_SEED)
        names = [n for name in Z3_CONFIGS for n in (name, name + LATER)]
        result = launch_cases(lambda env: launch(
            rank_zero3, Z3_WORLD, args=(seed,), rank_args=per_rank(x, y, Z3_WORLD),
            forbid=z3_forbid(), transport="sidecar", timeout=LAUNCH_TIMEOUT, env=env), names)
        refs = {name: z3_reference(name, seed, x, y) for name in Z3_CONFIGS}
        return result, refs
    return MEMO.get(("zero3", impl), make)


def z3_case(launch: Any, impl: Any, name: str, whole: bool = True
            ) -> tuple[Any, list[dict], dict]:
    """(launch result, the case's value per rank, the reference); raises the case's error (not
    implemented, a crash) in the test that reads it. `whole=False`: step 1's evidence only
    (construction, step-1 probes and gradients), which a crash in a later step keeps."""
    result, refs = launch_zero3(launch, impl)
    values = [dict(case_value(v[name], f"Zero3 ({name})", rank=r, world_size=Z3_WORLD))
              for r, v in enumerate(result.values)]
    if whole:
        for r, v in enumerate(result.values):
            values[r].update(case_value(v[name + LATER], f"Zero3 ({name}) in steps 2-{Z3_STEPS}",
                                        rank=r, world_size=Z3_WORLD))
    return result, values, refs[name]


def z3_steps(launch: Any, impl: Any, name: str) -> list[int]:
    """The steps of configuration `name` whose communication can be judged: every step, or
    step 1 alone (index 0) when a later step raised; step 1's error is raised."""
    z3_case(launch, impl, name, whole=False)
    try:
        z3_case(launch, impl, name)
    except AssertionError:
        return [0]
    return list(range(Z3_STEPS))


# -- Part 2: FSDP2 -------------------------------------------------------------------------
F2_SEED = 23


def f2_data(world_size: int, steps: int, batch: int, seed: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(seed)
    x = torch.randn(steps, world_size * batch, IN, generator=gen)
    y = torch.randn(steps, world_size * batch, OUT, generator=gen)
    return x, y


# The in-rank launches "ckpt4" and "ckpt2" (`_ranks_checkpoint`), shared by
# test_fsdp2_precision and test_fsdp2_checkpoint.
BATCH4 = 2  # rows per rank on 4 ranks; 4 per rank on 2 ranks: the same global batch
REDUCE_ROWS = ([256.0, 3.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])  # one row per rank
REDUCE_MEAN = [[64.75, 1.5]]  # exact in float32; a bf16 sum of 256 + 1 + 1 + 1 is not


def ckpt_data() -> tuple[torch.Tensor, torch.Tensor]:
    return f2_data(4, STEPS, BATCH4, F2_SEED + 7)


def ckpt4(launch: Any, impl: Any) -> tuple[Any, dict]:
    """(the 4-rank launch's values per rank, references)."""
    def make() -> tuple[Any, dict]:
        x, y = ckpt_data()
        seed = shifted(F2_SEED)
        rank_args = [(list(REDUCE_ROWS[r]),) + per_rank(x, y, 4)[r] for r in range(4)]
        result = launch(rank_ckpt4, 4, args=(seed,), rank_args=rank_args,
                        timeout=MEMO.timeout(LAUNCH_TIMEOUT), functional_collectives=True)
        refs = {"final": f2_reference(seed, x, y, "adamw", ADAMW, STEPS), "seed": seed,
                "x": x, "y": y}
        return result.values, refs
    return MEMO.get(("ckpt4", impl), make)


def case4(launch: Any, impl: Any, name: str) -> list:
    values, _ = ckpt4(launch, impl)
    return [case_value(v[name], name, rank=r, world_size=4) for r, v in enumerate(values)]


def ckpt2(launch: Any, impl: Any) -> list:
    saved = case4(launch, impl, "save")
    files: dict[str, torch.Tensor] = {}
    for value in saved:
        files.update(value["files"])
    _, refs = ckpt4(launch, impl)

    def make() -> list:
        result = launch(rank_ckpt2, 2, args=(refs["seed"], files),
                        rank_args=per_rank(refs["x"], refs["y"], 2),
                        timeout=MEMO.timeout(LAUNCH_TIMEOUT), functional_collectives=True)
        return result.values
    return MEMO.get(("ckpt2", impl), make)


def case2(launch: Any, impl: Any, name: str) -> list:
    return [case_value(v[name], name, rank=r, world_size=2)
            for r, v in enumerate(ckpt2(launch, impl))]


def joined(per_rank_values: list, name: str, key: str | None = None) -> torch.Tensor:
    """The full tensor of parameter `name` from the local shards of every rank (dim 0)."""
    parts = [v[name] if key is None else v[key] for v in per_rank_values]
    return torch.cat(parts)
