"""The configurations of the zero2 hidden suite and the runs that several test modules share.

A `spec` is a plain dict:
    arch        "tiny" (fc1 -> *scale -> fc2 -> head, with a 1-element parameter) or "mlp"
    widths      layer widths of the "mlp" arch, e.g. [4, 24, 48, 3]
    dtype       "float64" or "float32"
    frozen      parameter names with requires_grad=False
    optimizer   "adamw" or "sgd"; defaults: keyword arguments for it
    groups      None (one group of every parameter) or [{"names": [...], **hyperparameters}]
    steps, batch (rows per rank), seed, clip (max_norm or None)
    checkpoint_after   optional: save and resume after this many steps (see `_ranks.rank_train`)

`make_data` draws a spec's global batch and `rank_slices` cuts it per rank. `shared_run` trains
each of `CONFIGS` once per pytest process, for every module that needs it (parity, memory and
communication, checkpoints read different parts of the same runs), with its reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from grader.seeds import seeded_generator
from grader.suites.zero2._ranks import in_features, out_features, rank_train
from grader.suites.zero2._ref import Reference, reference_run
from harness import CommRecord
from harness.cases import Memo
from harness.commlog import as_log

# Wall-clock limit of one launch: generous, because a loaded 2-core runner is slow to start
# ranks; a hang still ends.
LAUNCH_TIMEOUT = 180.0

# Two groups with different lr and weight decay over the tiny model; in every world size the
# suite uses, a group boundary falls inside a shard and fc1.weight straddles a shard boundary.
TWO_GROUPS = [
    {"names": ["fc1.weight", "head.weight", "fc2.weight"], "lr": 1e-2, "weight_decay": 0.1},
    {"names": ["fc1.bias", "scale", "fc2.bias", "head.bias"], "lr": 3e-2, "weight_decay": 0.0},
]


def make_data(spec: dict, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs [steps, world*batch, in] and targets [steps, world*batch, out] of the spec."""
    gen = seeded_generator(spec["seed"] + 1)
    rows = world_size * spec["batch"]
    dtype = getattr(torch, spec["dtype"])
    x = torch.randn(spec["steps"], rows, in_features(spec), generator=gen, dtype=dtype)
    y = torch.randn(spec["steps"], rows, out_features(spec), generator=gen, dtype=dtype)
    return x, y


def rank_slices(x: torch.Tensor, y: torch.Tensor, world_size: int) -> list[tuple]:
    """Per-rank `rank_args`: rank r gets rows [r*b, (r+1)*b) of every step (different data)."""
    b = x.shape[1] // world_size
    return [(x[:, r * b:(r + 1) * b].clone(), y[:, r * b:(r + 1) * b].clone())
            for r in range(world_size)]


# -- runs shared by several test modules ------------------------------------------------------
BASE = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 5,
        "batch": 3, "clip": None, "groups": TWO_GROUPS}


CONFIGS = {  # name -> (spec, world size)
    "adamw-3": (dict(BASE, seed=11, optimizer="adamw", defaults={"lr": 1e-2}), 3),
    "sgd-4": (dict(BASE, seed=12, optimizer="sgd", defaults={"lr": 0.05, "momentum": 0.9}), 4),
    "adamw-2-checkpoint": (dict(BASE, seed=13, optimizer="adamw", checkpoint_after=3,
                                defaults={"lr": 1e-2, "betas": (0.8, 0.99)}), 2),
}


@dataclass
class Run:
    values: list[dict]  # per rank, what rank_train returned
    comm: list[list[CommRecord]]  # what the sidecars carried, as a log (harness.commlog.as_log)
    ref: Reference
    spec: dict
    world_size: int


_RUNS = Memo()  # (impl, name) -> Run, or the launch's error


def shared_run(launch: Any, impl: str, name: str) -> Run:
    """CONFIGS[name] trained once per pytest process and --impl, for every module that asks.

    A failed launch is remembered too (harness.cases.Memo), so each test that needs it fails
    at once with the same reason.
    """
    def make() -> Run:
        spec, world_size = CONFIGS[name]
        x, y = make_data(spec, world_size)
        # Over the sidecars: the communication the tests judge is what they carried (as_log),
        # not what the rank logged.
        result = launch(rank_train, world_size=world_size, args=(spec,),
                        rank_args=rank_slices(x, y, world_size), timeout=LAUNCH_TIMEOUT,
                        transport="sidecar")
        state_after = (spec["checkpoint_after"],) if spec.get("checkpoint_after") else ()
        return Run(result.values, [as_log(wire) for wire in result.wire],
                   reference_run(spec, x, y, state_after=state_after),  # type: ignore[arg-type]
                   spec, world_size)

    return _RUNS.get((impl, name), make)
