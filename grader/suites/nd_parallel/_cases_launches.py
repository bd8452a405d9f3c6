"""The suite's three launches, test side: each built once per session (inputs and expected
values), sent to the ranks without their expected values, launched once per session and
implementation and shared by every module that judges it (`harness.cases.Memo`).

- "pure": 1 rank, in-rank transport (no communication to judge): mesh arithmetic,
  `shard_params`, the planner.
- "four": 4 ranks, sidecar transport: `build_mesh` and `train_2d`.
- "eight": 8 ranks, sidecar transport: `train_3d` on 2×2×2.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.seeds import seeded_generator
from grader.suites.nd_parallel import _cases as C
from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._ranks import rank_multi, rank_pure
from harness.cases import Memo, case_values

BACKEND = "gloo"
TRANSPORT = "sidecar"
TIMEOUT_S = {"pure": 60.0, "four": 120.0, "eight": 180.0}
WORLD = {"pure": 1, "four": 4, "eight": 8}
_CASES: dict[str, dict[str, dict[str, Any]]] = {}
_RUNS = Memo(hang_timeout=20.0)


# ---- the pure launch --------------------------------------------------------------------------

def _mesh_cases() -> dict[str, dict]:
    shapes = list(C.SHAPES.values())
    drawn = C.drawn_shapes()
    out: dict[str, dict] = {}
    for label, pool in (("fixed", shapes), ("drawn", drawn)):
        coords = [(r, s) for s in pool for r in range(len(R.mesh_table(s)))]
        out[f"coords {label}"] = {"group": "mesh", "kind": "coords", "calls": coords,
                                  "expected": [R.coords_ref(r, s) for r, s in coords]}
        ranks = [(R.coords_ref(r, s), s) for r, s in coords]
        out[f"rank {label}"] = {"group": "mesh", "kind": "rank", "calls": ranks,
                                "expected": [r for r, _ in coords]}
        groups = [(s, a) for s in pool for a in s]
        out[f"groups {label}"] = {"group": "mesh", "kind": "groups", "calls": groups,
                                  "expected": [R.groups_ref(s, a) for s, a in groups]}
    out["resolve"] = {"group": "mesh", "kind": "resolve", "calls": list(C.RESOLVE_OK.values()),
                      "labels": list(C.RESOLVE_OK)}
    out["resolve"]["expected"] = [_resolved(s, w) for s, w in C.RESOLVE_OK.values()]
    for kind, table in (("resolve_bad", C.RESOLVE_BAD), ("coords_bad", C.COORDS_BAD),
                        ("rank_bad", C.RANK_BAD), ("groups_bad", C.GROUPS_BAD)):
        out[kind] = {"group": "mesh", "kind": kind, "calls": list(table.values()),
                     "labels": list(table), "expected": ["ValueError"] * len(table)}
    return out


def _resolved(shape: dict[str, int], world: int) -> dict[str, int]:
    known = 1
    for n in shape.values():
        known *= n if n != -1 else 1
    return {a: (world // known if n == -1 else n) for a, n in shape.items()}


def _shard_cases() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for i, (label, c) in enumerate({**C.SHARD_CASES, **C.SHARD_BAD}.items()):
        params = R.dense_params(seeded_generator(500 + i), c["blocks"], c["hidden"], c["ffn"])
        bad = label in C.SHARD_BAD
        case = {"group": "shard", "kind": "shard_bad" if bad else "shard", "params": params,
                "t": c["t"], "j": c["j"]}
        case["expected"] = "ValueError" if bad else R.shard_ref(params, c["j"], c["t"])
        out[f"shard {label}"] = case
    return out


def _spec_args(mn: str | None = None, cn: str | None = None,
               layout: dict | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mn is not None:
        out["model"] = C.MODELS[mn]
    if cn is not None:
        out["cluster"] = C.CLUSTERS[cn]
    if layout is not None:
        out["layout"] = layout
    return out


def _planner_cases() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for mn in C.MODELS:
        out[f"param_count {mn}"] = {"kind": "param_count", **_spec_args(mn),
                                    "expected": R.params_of(C.MODELS[mn])}
    for label, (mn, cn, lay, gb) in C.LAYOUTS.items():
        m, c = C.MODELS[mn], C.CLUSTERS[cn]
        base = {**_spec_args(mn, cn, lay), "gb": gb}
        out[f"memory {label}"] = {"kind": "memory", **base, "expected": R.memory_ref(m, lay, gb)}
        out[f"comm {label}"] = {"kind": "comm", **base, "expected": R.comm_ref(m, c, lay, gb)}
        out[f"step {label}"] = {"kind": "step", **base, "expected": R.step_ref(m, c, lay, gb)}
    for args in C.COLLECTIVES:
        out[f"collective {args[0]} n={args[1]:.3g} k={args[2]}"] = {
            "kind": "collective", "args": list(args), "expected": R.coll_ref(*args)}
    for p, mb in C.BUBBLES:
        out[f"bubble p={p} m={mb}"] = {"kind": "bubble", "args": [p, mb],
                                       "expected": R.bubble_ref(p, mb)}
    for label, (mn, cn, gb, mbs) in C.SCENARIOS.items():
        out[f"best {label}"] = {"kind": "best", **_spec_args(mn, cn), "gb": gb,
                                "micro_batch": mbs,
                                "expected": R.best_ref(C.MODELS[mn], C.CLUSTERS[cn], gb, mbs)}
    for label, (mn, cn, tp, b, ctx) in C.DECODES.items():
        m, c = C.MODELS[mn], C.CLUSTERS[cn]
        lat = R.decode_ref(m, c, tp, b, ctx)
        out[f"kv {label}"] = {"kind": "kv", **_spec_args(mn), "args": [b, ctx],
                              "expected": R.kv_ref(m, b, ctx)}
        out[f"decode {label}"] = {"kind": "decode", **_spec_args(mn, cn), "args": [tp, b, ctx],
                                  "expected": lat}
        out[f"throughput {label}"] = {"kind": "throughput", **_spec_args(mn, cn),
                                      "args": [tp, b, ctx], "expected": b / (lat * tp)}
    for label, (mn, cn, target, b, ctx) in C.TARGETS.items():
        out[f"min_tp {label}"] = {"kind": "min_tp", **_spec_args(mn, cn),
                                  "args": [target, b, ctx],
                                  "expected": R.min_tp_ref(C.MODELS[mn], C.CLUSTERS[cn],
                                                           target, b, ctx)}
    bad: dict[str, tuple[str, list[dict]]] = {}
    for label, (mn, _, lay, gb) in C.LAYOUT_BAD.items():
        bad[f"memory_per_gpu {label}"] = ("memory_per_gpu", [
            _spec_args(mn), _spec_args(layout=lay), {"value": gb}])
    for label, (mn, cn, lay, gb) in C.COMM_BAD.items():
        bad[f"comm_time {label}"] = ("comm_time", [
            _spec_args(mn), _spec_args(cn=cn), _spec_args(layout=lay), {"value": gb}])
    for args in C.COLLECTIVES_BAD:
        bad[f"collective_time{args}"] = ("collective_time",
                                                         [{"value": a} for a in args])
    bad["bubble_fraction pp=0"] = ("bubble_fraction", [{"value": 0}, {"value": 4}])
    bad["bubble_fraction micro_batches=0"] = ("bubble_fraction", [{"value": 4}, {"value": 0}])
    bad["param_count heads=32 kv_heads=5"] = ("param_count", [{"model": {
        **C.MODELS["1B"], "kv_heads": 5}}])
    odd = {**C.MODELS["1B"], "layers": 5, "hidden": 100, "heads": 3, "kv_heads": 1}
    bad["best_layout hidden=100 heads=3 (no candidate either)"] = ("best_layout", [
        {"model": odd}, _spec_args(cn="h100x8"), {"value": 1}])
    bad["best_layout global batch 0"] = ("best_layout", [
        _spec_args("8B"), _spec_args(cn="h100x8"), {"value": 0}])
    bad["best_layout micro_batch 0"] = ("best_layout", [
        _spec_args("8B"), _spec_args(cn="h100x8"), {"value": 64}, {"value": 0}])
    bad["min_tp_for_latency target=0"] = ("min_tp_for_latency", [
        _spec_args("8B"), _spec_args(cn="h100x8"), {"value": 0.0}, {"value": 1},
        {"value": 4096}])
    bad["param_count hidden=100 heads=3"] = ("param_count", [{"model": {
        **C.MODELS["1B"], "hidden": 100, "heads": 3, "kv_heads": 1}}])
    for label, (mn, cn, tp, b, ctx) in C.DECODES_BAD.items():
        bad[f"decode_latency {label}"] = ("decode_latency", [
            _spec_args(mn), _spec_args(cn=cn), {"value": tp}, {"value": b}, {"value": ctx}])
    for name, (function, args) in bad.items():
        out[f"bad {name}"] = {"kind": "bad", "function": function, "args": args,
                              "expected": "ValueError"}
    return {name: {"group": "planner", **c} for name, c in out.items()}


# ---- the multi-rank launches ------------------------------------------------------------------

def _train_case(label: str, mesh: dict[str, int], model: dict[str, int], seed: int,
                bad: bool = False) -> dict:
    gen = seeded_generator(seed)
    params = R.dense_params(gen, model["blocks"], model["hidden"], model["ffn"])
    shape = (model["steps"], model["batch"], model["hidden"])
    x = torch.randn(*shape, generator=gen, dtype=R.F64)
    y = torch.randn(*shape, generator=gen, dtype=R.F64)
    case: dict[str, Any] = {"kind": "train_bad" if bad else "train", "mesh": mesh,
                            "params": params, "x": x, "y": y, "lr": C.LR, "momentum": C.MOMENTUM}
    if bad:
        case["expected"] = "ValueError"
    else:
        final, bufs = R.dense_train(params, x, y, C.LR, C.MOMENTUM)
        case["expected"] = {"final": final, "momentum": bufs,
                            "magnitude": max(float(t.abs().max()) for t in final.values())}
    return case


def _four_cases() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for label, shape in C.BUILD_4.items():
        resolved = _resolved(shape, 4)
        out[f"build {label}"] = {"kind": "build", "shape": shape, "expected": resolved}
    for label, shape in C.BUILD_4_BAD.items():
        out[f"build {label}"] = {"kind": "build_bad", "shape": shape, "expected": "ValueError"}
    for i, (label, mesh) in enumerate(C.TRAIN_2D.items()):
        out[f"train_2d {label}"] = _train_case(label, mesh, C.MODEL, 700 + i)
    for label, (mesh, batch) in C.TRAIN_2D_BAD.items():
        out[f"train_2d {label}"] = _train_case(label, mesh, {**C.MODEL, "batch": batch}, 790,
                                               bad=True)
    return out


def _eight_cases() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for i, (label, mesh) in enumerate(C.TRAIN_3D.items()):
        out[f"train_3d {label}"] = _train_case(label, mesh, C.MODEL, 800 + i)
    for label, model in C.TRAIN_3D_BAD.items():
        out[f"train_3d {label}"] = _train_case(label, {"dp": 2, "zero": 2, "tp": 2}, model,
                                               890, bad=True)
    return out


BUILDERS = {"pure": lambda: {**_mesh_cases(), **_shard_cases(), **_planner_cases()},
            "four": _four_cases, "eight": _eight_cases}


def cases_for(which: str) -> dict[str, dict[str, Any]]:
    """The cases of one launch, built once per session (inputs and expected values)."""
    if which not in _CASES:
        _CASES[which] = BUILDERS[which]()
    return _CASES[which]


def strip(case: dict) -> dict:
    return {k: v for k, v in case.items() if k not in ("expected", "labels")}


def run(launch: Any, impl: Any, which: str) -> Any:
    """The launch `which`, once per session and implementation."""

    def make() -> Any:
        cases = {name: strip(c) for name, c in cases_for(which).items()}
        fn = rank_pure if which == "pure" else rank_multi
        return launch(fn, world_size=WORLD[which], args=(cases,), backend=BACKEND,
                      transport="in-rank" if which == "pure" else TRANSPORT,
                      timeout=_RUNS.timeout(TIMEOUT_S[which]))

    return _RUNS.get((str(impl.text), which), make)


def expected(which: str, name: str) -> Any:
    return cases_for(which)[name]["expected"]


def case(which: str, name: str) -> dict:
    return cases_for(which)[name]


def values(result: Any, name: str) -> list[Any]:
    """Every rank's value of case `name` (the earliest failure raised)."""
    return case_values(result.values, name)
