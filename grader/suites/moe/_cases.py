"""What the moe hidden suite runs: its cases, built from fixed seeds with their expected values
(`_ref`), and the one launch per world size that runs them all, shared by every test module.

`cases_for(world)` holds every case of a world size: the single-process functions' cases
(`_cases_units`, in the 2-rank launch, read from rank 0), all_to_all_tokens on uneven splits,
and MoELayer with top-1 and top-2, with and without a capacity, and (4 ranks) with one rank whose
experts no token chooses. `run` makes the launch once per (implementation, world size); a case
that hangs (a rank that leaves out a collective) costs only itself: the launch is made again
without it (`harness.cases.launch_cases`), and reading it raises the hang, its first line naming
the case and who waited on what.

The launches use the sidecar transport: the all-to-alls the tests count and size are what the
sidecars carried (`wire_windows`, the wire cut by the rank's marks, which only label), never the
rank's own log, which code under test could go around.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from grader.suites.moe import _cases_units
from grader.suites.moe._ranks import rank_all
from grader.suites.moe._ref import (
    EXPERTS,
    FFN,
    HIDDEN,
    layer_reference,
    randn,
    separated,
    traffic_bounds,
)
from harness import CommRecord
from harness.cases import Memo, case_values, launch_cases
from harness.commlog import as_log, windows

BACKEND = "gloo"  # CPU tensors everywhere: gloo even where a GPU would let "auto" pick NCCL
TRANSPORT = "sidecar"  # the traffic the tests judge is carried and logged outside the rank
TIMEOUT_S = 90.0
WORLDS = (2, 4)


def dense_params(seed: int, empty_rank: int | None = None, world: int = 2) -> dict[str, Any]:
    params = {"router": randn(seed, EXPERTS, HIDDEN),
              "w_gate": randn(seed + 1, EXPERTS, FFN, HIDDEN, scale=0.4),
              "w_up": randn(seed + 2, EXPERTS, FFN, HIDDEN, scale=0.4),
              "w_down": randn(seed + 3, EXPERTS, HIDDEN, FFN, scale=0.3)}
    if empty_rank is not None:
        # Input feature 0 is 1 for every token; experts of `empty_rank` get a logit ~ -40.
        local = EXPERTS // world
        params["router"][empty_rank * local:(empty_rank + 1) * local, 0] = -40.0
    return params


def tokens(seed: int, world: int, constant_feature: bool) -> list[torch.Tensor]:
    xs = [randn(seed + 10 + r, 9 + r, HIDDEN) for r in range(world)]  # T differs by rank
    if constant_feature:
        for x in xs:
            x[:, 0] = 1.0
    return xs


def layer_case(world: int, k: int, cf: float | None, seed: int,
               empty_rank: int | None = None) -> dict[str, Any]:
    params = dense_params(seed, empty_rank, world)
    xs = tokens(seed, world, empty_rank is not None)
    grads = [randn(seed + 30 + r, x.shape[0], HIDDEN) for r, x in enumerate(xs)]
    reference = layer_reference(params, xs, grads, k, cf)
    for rank_ref in reference["ranks"]:
        assert separated(rank_ref["logits"], k), "a near-tie in the router: pick another seed"
    if cf is not None:
        assert any(not bool(rr["keep"].all()) for rr in reference["ranks"]), "nothing dropped"
    return {"kind": "layer", "world": world, "k": k, "cf": cf, "params": params, "xs": xs,
            "grads": grads, "expected": reference, "bounds": traffic_bounds(reference, world)}


def layer_name(k: int, cf: float | None, empty: bool = False) -> str:
    """The case's name, in test ids and messages (a declared label: never scrubbed)."""
    label = f"k={k}-capacity_factor={cf}" + ("-one_rank_receives_nothing" if empty else "")
    return label


LayerSpec = tuple[int, float | None, int, int | None]  # (k, cf, seed, empty rank or None)
LAYER_SPECS: dict[int, list[LayerSpec]] = {  # world -> its layer cases
    2: [(1, None, 100, None), (2, None, 110, None), (1, 1.0, 120, None), (2, 1.0, 130, None)],
    4: [(1, None, 200, None), (2, None, 210, None), (1, 1.25, 220, None), (2, 1.0, 230, None),
        (2, None, 240, 3)],
}


def a2a_case(splits: list[list[int]], seed: int, trailing: tuple[int, ...] = (3,)
             ) -> dict[str, Any]:
    """splits[i][j]: rows rank i sends rank j. Expected outputs and input gradients."""
    world = len(splits)
    xs = [randn(seed + i, sum(splits[i]), *trailing) for i in range(world)]
    recv = [[splits[i][j] for i in range(world)] for j in range(world)]
    outs_grad = [randn(seed + 50 + j, sum(recv[j]), *trailing) for j in range(world)]

    def blocks(t: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
        return list(torch.split(t, sizes))

    x_blocks = [blocks(xs[i], splits[i]) for i in range(world)]
    g_blocks = [blocks(outs_grad[j], recv[j]) for j in range(world)]
    out = [torch.cat([x_blocks[i][j] for i in range(world)]) for j in range(world)]
    x_grad = [torch.cat([g_blocks[j][i] for j in range(world)]) for i in range(world)]
    return {"kind": "a2a", "splits": splits, "xs": xs, "out_grads": outs_grad,
            "expected": {"out": out, "x_grad": x_grad}}


A2A_SPECS = {  # world -> {name: (splits, seed, trailing shape of a row)}
    2: {"uneven": ([[2, 3], [1, 4]], 300, (3,)),
        "one_rank_sends_nothing": ([[0, 0], [2, 1]], 310, (2, 2))},
    # Every rank sends as many rows as it receives, yet the splits are not symmetric: a
    # backward that forgets to swap them runs without error and misroutes the gradient.
    4: {"equal_totals": ([[1, 2, 0, 0], [0, 1, 2, 0], [0, 0, 1, 2], [2, 0, 0, 1]], 320, (3,)),
        "uneven_with_empty_pairs": ([[0, 3, 1, 0], [2, 0, 0, 5], [1, 1, 1, 1], [0, 0, 4, 2]],
                                    330, (2, 2))},
}


# ---- the launches ------------------------------------------------------------------------------

_REFS: dict[int, dict[str, dict]] = {}


def cases_for(world: int) -> dict[str, dict]:
    """Every case of `world` ranks by name, in launch order, with its expected values (built
    once per process)."""
    if world not in _REFS:
        cases: dict[str, dict] = {}
        if world == 2:
            cases.update(_cases_units.cases())
        for name, (splits, seed, trailing) in A2A_SPECS[world].items():
            cases[f"a2a {name}"] = a2a_case(splits, seed, trailing)
        for k, cf, seed, empty in LAYER_SPECS[world]:
            cases[f"layer {layer_name(k, cf, empty is not None)}"] = layer_case(
                world, k, cf, seed, empty)
        if world == 2:
            cases["layer fresh"] = {"kind": "fresh", "hidden": 16, "ffn": 64, "experts": 8,
                                    "dense": dense_params(140)}
            for what in ("route", "capacity", "all_to_all", "layer"):
                cases[f"invalid {what}"] = {"kind": "invalid", "what": what}
        _REFS[world] = cases
    return _REFS[world]


def _strip(case: dict) -> dict:
    """What travels to the ranks: the case without its expected values."""
    return {k: v for k, v in case.items() if k not in ("expected", "bounds")}


_RUNS = Memo()


def run(launch: Any, impl: Any, world: int) -> Any:
    """The launch of every case of `world` ranks, once per session and implementation (`impl`,
    the session's --impl). A case that hangs costs only itself: the launch is made again
    without it (`harness.cases.launch_cases`), however long the hang took to be found."""
    def make() -> Any:
        cases = {name: _strip(c) for name, c in cases_for(world).items()}
        return launch_cases(lambda env: launch(
            rank_all, world_size=world, args=(cases,), backend=BACKEND, transport=TRANSPORT,
            timeout=_RUNS.timeout(TIMEOUT_S), env=env), list(cases))

    return _RUNS.get((str(impl.text), world), make)


def wire_windows(result: Any, rank: int) -> defaultdict[str, list[CommRecord]]:
    """What the sidecars carried for `rank`, as a log cut at its marks (label -> records); a
    phase in which nothing was carried is an empty window."""
    return defaultdict(list, windows(as_log(result.wire[rank])))


def values(result: Any, name: str) -> list[Any]:
    """Every rank's value of case `name`, or the case's failure raised (`case_values`)."""
    return case_values(result.values, name)
