"""Part 2, the strategies: one 4-rank launch (sidecar transport) shards the float32 model
(embed and head at the root, 3 blocks: 4 units) with each strategy, trains one SGD step, and
gathers the full state dict; then `build_mesh`'s errors.

Collectives are read from the sidecars' wire log, cut by the phase marks of the rank function;
the wire log says which ranks each collective ran among, so HSDP's groups are checked there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from grader.compare import assert_close, steps_bound
from grader.seeds import shifted
from grader.suites.fsdp._cases import F2_SEED, LAUNCH_TIMEOUT, MEMO, f2_data, per_rank
from grader.suites.fsdp._ranks import F2_BLOCKS, build_f2
from grader.suites.fsdp._ref import f2_reference
from harness.cases import case_value, run_cases, where

WORLD = 4
UNITS = F2_BLOCKS + 1  # every block, then the root (embed + head)
STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
SGD: dict[str, Any] = {"lr": 0.1}
GATHERS = ("allgather", "allgather_base")
SCATTERS = ("reduce_scatter", "reduce_scatter_base")
SHARD_GROUPS = {(0, 1), (2, 3)}
REPLICATE_GROUPS = {(0, 2), (1, 3)}
ALL = (0, 1, 2, 3)


def rank_strategies(ctx, seed: int, x: torch.Tensor, y: torch.Tensor) -> dict:
    fsdp2 = ctx.impl_module("fsdp", "fsdp2")

    def step(strategy: str) -> dict:
        model = build_f2(seed)
        fsdp2.shard_model(model, strategy, shard_size=2 if strategy == "HYBRID_SHARD" else None)
        opt = torch.optim.SGD(model.parameters(), **SGD)
        ctx.mark(f"{strategy} forward")
        loss = ((model(x[0]) - y[0]) ** 2).mean()
        ctx.mark(f"{strategy} backward")
        loss.backward()
        ctx.mark(f"{strategy} optimizer")
        opt.step()
        ctx.mark(f"{strategy} done")
        params = list(model.named_parameters())
        return {"types": {n: type(p).__name__ for n, p in params},
                "placements": {n: str(getattr(p, "placements", None)) for n, p in params},
                "local": {n: (p.to_local() if hasattr(p, "to_local") else p).detach().clone()
                          for n, p in params}}

    def mesh_errors() -> dict:
        out = {}
        for label, args in {"unknown": ("ZERO_9", 4, None), "no-size": ("HYBRID_SHARD", 4, None),
                            "not-dividing": ("HYBRID_SHARD", 4, 3),
                            "zero": ("HYBRID_SHARD", 4, 0),
                            "size-one": ("HYBRID_SHARD", 4, 1)}.items():
            try:
                mesh = fsdp2.build_mesh(*args)
                out[label] = f"mesh {tuple(mesh.shape)}"
            except NotImplementedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the type is what the test judges
                out[label] = f"{type(exc).__name__}: {exc}"
        return out

    cases: list[tuple[str, Callable[[], Any]]] = []
    for strategy in STRATEGIES:
        cases.append((strategy, lambda s=strategy: step(s)))
    cases.append(("mesh errors", mesh_errors))

    def model_errors() -> str:
        try:
            fsdp2.shard_model(torch.nn.Linear(2, 2), "FULL_SHARD")
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the type is what the test judges
            return f"{type(exc).__name__}: {exc}"
        return "returned"

    cases.append(("model errors", model_errors))
    return run_cases(ctx, cases)


def shared(launch, impl):
    def make():
        x, y = f2_data(WORLD, 1, 2, F2_SEED + 1)
        seed = shifted(F2_SEED)
        result = launch(rank_strategies, WORLD, args=(seed,), rank_args=per_rank(x, y, WORLD),
                        transport="sidecar", timeout=MEMO.timeout(LAUNCH_TIMEOUT))
        return result, f2_reference(seed, x, y, "sgd", SGD, 1)
    return MEMO.get(("fsdp2", impl), make)


def values(launch, impl, case: str) -> tuple:
    result, ref = shared(launch, impl)
    got = [case_value(v[case], f"{case}", rank=r, world_size=WORLD)
           for r, v in enumerate(result.values)]
    return result, got, ref


def phase(result, rank: int, label: str) -> list:
    return [w for w in result.wire[rank] if w.label == label]


def count(wire: list, kinds: tuple) -> int:
    return sum(w.kind in kinds for w in wire)


@pytest.mark.points(2)
@pytest.mark.exercises("shard_model")
def test_parameters_are_dtensors_sharded_on_dim0(launch, impl):
    for strategy in ("FULL_SHARD", "HYBRID_SHARD"):
        _, got, ref = values(launch, impl, strategy)
        want = "(Shard(dim=0),)" if strategy == "FULL_SHARD" else "(Replicate(), Shard(dim=0))"
        shard = WORLD if strategy == "FULL_SHARD" else 2
        for rank, value in enumerate(got):
            assert sorted(value["types"]) == sorted(ref), (
                f"{where(rank, WORLD)} {strategy}: parameter names changed: "
                f"{sorted(value['types'])[:3]}")
            for name, kind in value["types"].items():
                assert kind == "DTensor", (
                    f"{where(rank, WORLD)} {strategy}: {name} is a {kind}, not a DTensor; "
                    f"fully_shard every block, then the root")
                assert value["placements"][name] == want, (
                    f"{where(rank, WORLD)} {strategy}: {name} placed {value['placements'][name]}"
                    f", expected {want}")
                rows, local = ref[name].shape[0], value["local"][name].shape[0]
                assert local == -(-rows // shard), (
                    f"{where(rank, WORLD)} {strategy}: {name} holds {local} rows locally; "
                    f"sharded {shard} ways on dim 0 it holds ceil({rows}/{shard})")


def check_counts(launch, impl, strategy: str, forward: dict, backward: dict) -> None:
    result, _, _ = values(launch, impl, strategy)
    for rank in range(WORLD):
        for phase_name, want in (("forward", forward), ("backward", backward)):
            wire = phase(result, rank, f"{strategy} {phase_name}")
            got = {"all-gathers": count(wire, GATHERS),
                   "reduce-scatters": count(wire, SCATTERS),
                   "all-reduces": count(wire, ("allreduce",))}
            expected = {k: want.get(k, 0) for k in got}
            assert got == expected, (
                f"{where(rank, WORLD)} {strategy} {phase_name}: one collective per unit, "
                f"{F2_BLOCKS} blocks + the root wrapped separately: expected {expected}, got "
                f"{got}")
        opt = phase(result, rank, f"{strategy} optimizer")
        assert not opt, f"{where(rank, WORLD)} {strategy}: the optimizer step communicated"


@pytest.mark.points(4)
@pytest.mark.exercises("shard_model")
def test_full_shard_collectives_match_the_wrapping(launch, impl):
    check_counts(launch, impl, "FULL_SHARD", {"all-gathers": UNITS},
                 {"all-gathers": UNITS, "reduce-scatters": UNITS})
    result, _, _ = values(launch, impl, "FULL_SHARD")
    for rank in range(WORLD):
        groups = {w.group_ranks for w in phase(result, rank, "FULL_SHARD backward")}
        assert groups == {ALL}, f"{where(rank, WORLD)} FULL_SHARD collectives in {groups}"


@pytest.mark.points(3)
@pytest.mark.exercises("shard_model")
def test_shard_grad_op_gathers_nothing_in_backward(launch, impl):
    check_counts(launch, impl, "SHARD_GRAD_OP", {"all-gathers": UNITS}, {"reduce-scatters": UNITS})


@pytest.mark.points(2)
@pytest.mark.exercises("shard_model")
def test_no_shard_only_all_reduces(launch, impl):
    check_counts(launch, impl, "NO_SHARD", {}, {"all-reduces": UNITS})


@pytest.mark.points(4)
@pytest.mark.exercises("shard_model")
def test_hsdp_collectives_stay_in_their_mesh_dimension(launch, impl):
    result, _, _ = values(launch, impl, "HYBRID_SHARD")
    for rank in range(WORLD):
        for phase_name in ("forward", "backward"):
            for w in phase(result, rank, f"HYBRID_SHARD {phase_name}"):
                if w.kind in GATHERS + SCATTERS:
                    assert w.group_ranks in SHARD_GROUPS, (
                        f"{where(rank, WORLD)} HSDP {w.kind} among ranks {w.group_ranks}; shard "
                        f"groups are consecutive ranks {sorted(SHARD_GROUPS)}: mesh shape "
                        f"(replicate, shard), mesh dimensions swapped?")
                else:
                    assert w.group_ranks in REPLICATE_GROUPS, (
                        f"{where(rank, WORLD)} HSDP {w.kind} among ranks {w.group_ranks}; the "
                        f"gradient all-reduce runs across replicas {sorted(REPLICATE_GROUPS)}: "
                        f"mesh dimensions swapped?")
    check_counts(launch, impl, "HYBRID_SHARD", {"all-gathers": UNITS},
                 {"all-gathers": UNITS, "reduce-scatters": UNITS, "all-reduces": UNITS})


@pytest.mark.points(2)
@pytest.mark.exercises("build_mesh")
def test_build_mesh_rejects_bad_arguments(launch, impl):
    _, got, _ = values(launch, impl, "mesh errors")
    valid = got[0].pop("size-one")
    assert valid == "mesh (4, 1)", (
        f"build_mesh('HYBRID_SHARD', 4, shard_size=1) gave {valid}; a shard group of one rank is "
        f"valid: a (4, 1) mesh")
    for label, text in got[0].items():
        assert text.startswith("ValueError"), (
            f"build_mesh ({label}): expected ValueError, got {text}")
    assert "FULL_SHARD" in got[0]["unknown"], (
        f"build_mesh's error for an unknown strategy must list STRATEGIES: {got[0]['unknown']}")


MEMBERS = {"FULL_SHARD": ALL, "SHARD_GRAD_OP": ALL, "NO_SHARD": (0,), "HYBRID_SHARD": (0, 1)}


@pytest.mark.points(2)
@pytest.mark.exercises("shard_model")
def test_one_step_matches_single_process(launch, impl):
    """The local shards of one shard group, put together in the parent, after one SGD step."""
    tol = steps_bound(torch.float32, steps=1, depth_per_step=256).scaled(4)
    for strategy in STRATEGIES:
        _, got, ref = values(launch, impl, strategy)
        for name, expected in ref.items():
            full = torch.cat([got[r]["local"][name] for r in MEMBERS[strategy]])
            assert_close(full, expected, dtype=torch.float32, tol=tol,
                         what=f"{strategy} {name} after one SGD step (local shards of ranks "
                              f"{MEMBERS[strategy]} concatenated)")


@pytest.mark.points(1)
@pytest.mark.exercises("shard_model")
def test_shard_model_needs_blocks(launch, impl):
    _, got, _ = values(launch, impl, "model errors")
    assert got[0].startswith("ValueError"), (
        f"shard_model on a model without `blocks`: expected ValueError, got {got[0]}")
