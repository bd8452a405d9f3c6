"""The rank function of every ddp launch: which function runs each case kind.

Everything here runs inside rank processes (the functions travel by value); inputs, seeds and
hyperparameters come from the parent (`_cases`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.suites.ddp._ranks import Probe, build_model
from grader.suites.ddp._ranks_trainer import (
    case_accumulate,
    case_checkpoint,
    case_groups,
    case_lr,
    case_no_group_trainer,
    case_train_step_empty,
    case_train_step_sparse,
)
from grader.suites.ddp._ranks_wrapper import (
    case_bf16,
    case_construct,
    case_layouts,
    case_no_group_wrapper,
    case_no_sync,
    case_subgroups,
    case_train,
    case_unused,
    case_world_of_one,
)
from harness.cases import run_cases

WRAPPER_CASES = {"train": case_train, "no_sync": case_no_sync, "unused": case_unused,
                 "bf16": case_bf16, "subgroups": case_subgroups, "construct": case_construct}
TRAINER_CASES = {"accumulate": case_accumulate, "checkpoint": case_checkpoint}


def rank_cases(ctx: Any, cases: list[dict], data: dict) -> dict:
    """Run `cases` (each {"name", "kind", "spec"...}) with this rank's `data[name]`.

    The probe is built before the code under test is imported (see the module doc)."""
    probe = Probe(ctx)

    def make(case: dict) -> Callable[[], Any]:
        kind, name = case["kind"], case["name"]

        def run() -> Any:
            if kind in WRAPPER_CASES:
                mod = ctx.impl_module("ddp", "ddp")
                return WRAPPER_CASES[kind](ctx, probe, mod, name, case["spec"], data[name])
            if kind == "layouts":
                mod = ctx.impl_module("ddp", "ddp")
                return case_layouts(ctx, probe, mod, name, case["specs"], case["seed"])
            if kind == "world_of_one":
                return case_world_of_one(ctx.impl_module("ddp", "ddp"), case["spec"],
                                         data[name])
            if kind == "random_layouts":  # world of one, in-rank: no probe needed
                return case_layouts(ctx, None, ctx.impl_module("ddp", "ddp"), name,
                                    case["specs"], case["seed"])
            if kind == "default_cap":
                mod = ctx.impl_module("ddp", "ddp")
                return mod.DistributedDataParallel(build_model(case["spec"], 0)).bucket_layout
            if kind in ("no_group_wrapper", "no_group_bf16"):
                return case_no_group_wrapper(ctx.impl_module("ddp", "ddp"), case["spec"],
                                             data[name], hook=kind == "no_group_bf16")
            trainer = ctx.impl_module("ddp", "trainer")
            if kind in TRAINER_CASES:
                mod = ctx.impl_module("ddp", "ddp")
                return TRAINER_CASES[kind](ctx, probe, mod, trainer, name, case["spec"],
                                           data[name])
            if kind == "lr":
                return case_lr(trainer, case["configs"])
            if kind == "groups":
                return case_groups(trainer, case["spec"], case["seed"], case["kwargs"])
            if kind == "train_step_empty":
                return case_train_step_empty(trainer, case["spec"], case["seed"])
            if kind == "train_step_sparse":
                return case_train_step_sparse(trainer, case["spec"], data[name])
            if kind == "no_group_trainer":
                return case_no_group_trainer(trainer, case["spec"], data[name])
            raise ValueError(f"unknown case kind {kind!r}")

        return run

    return run_cases(ctx, [(case["name"], make(case)) for case in cases])
