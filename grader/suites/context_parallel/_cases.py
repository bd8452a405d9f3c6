"""The cases of each launch of the context_parallel suite, with their expected values, and the
launches: built once per session in the parent, sent to the ranks without their expected part,
launched once per session and implementation.

A case that hangs, or ends its launch otherwise, costs only itself: `harness.cases.launch_cases`
makes the launch again without it, and that case fails with what ended the launch.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.suites.context_parallel._cases_units import unit_cases
from grader.suites.context_parallel._ranks import F64, rank_all
from grader.suites.context_parallel._ref import (
    attention_tol,
    dense_block,
    fingerprint_of,
    full_attention,
    grad_of,
    randn,
    shard,
)
from harness.cases import Memo, case_values, launch_cases

BACKEND = "gloo"
TRANSPORT = "sidecar"
TIMEOUT_S = 90.0


# ---- ring and Ulysses cases -------------------------------------------------------------------

def ring_case(world: int, *, batch: int, heads: int, seq: int, dim: int, dim_v: int,
              causal: bool, seed: int, dtype: torch.dtype = F64, probe: bool = False,
              backward: bool = False) -> dict[str, Any]:
    q, k, v = (randn(seed, batch, heads, seq, dim, dtype=dtype),
               randn(seed + 1, batch, heads, seq, dim, dtype=dtype),
               randn(seed + 2, batch, heads, seq, dim_v, dtype=dtype))
    case: dict[str, Any] = {"kind": "ring", "causal": causal, "probe": probe,
                            "backward": backward, "q": shard(q, world), "k": shard(k, world),
                            "v": shard(v, world), "dtype": str(dtype)}
    expected: dict[str, Any] = {"out": shard(full_attention(q, k, v, causal)[0], world),
                                "tol": attention_tol(q, k, v, dtype, world)}
    if probe:
        prints = [(r, fingerprint_of(t)) for r in range(world)
                  for t in (case["k"][r], case["v"][r])]
        values = [p for _, p in prints]
        assert len(set(values)) == len(values), "fingerprints collide: pick another seed"
        for r in range(world):
            assert int(torch.isin(case["q"][r], torch.tensor(values, dtype=dtype)).sum()) == 0
        case["fingerprints"] = prints
    if backward:
        grad = randn(seed + 3, batch, heads, seq, dim_v, dtype=dtype)
        leaves = [t.clone().to(F64).requires_grad_() for t in (q, k, v)]
        out, _ = full_attention(leaves[0], leaves[1], leaves[2], causal=causal)
        out.backward(grad.to(F64))
        case["grad"] = shard(grad, world)
        expected.update({f"{n}_grad": shard(grad_of(t), world) for n, t in zip("qkv", leaves)})
        expected["grad_tol"] = expected["tol"].scaled(4 * seq)
    case["expected"] = expected
    return case


def ulysses_case(world: int, *, batch: int, heads: int, seq: int, dim: int, dim_v: int,
                 causal: bool, seed: int) -> dict[str, Any]:
    case = ring_case(world, batch=batch, heads=heads, seq=seq, dim=dim, dim_v=dim_v,
                     causal=causal, seed=seed)
    case["kind"] = "ulysses"
    shard_bytes = sum(t[0].numel() * t[0].element_size() for t in (case["q"], case["k"],
                                                                   case["v"]))
    out_bytes = case["expected"]["out"][0].numel() * 8
    case["expected"]["wire_bytes"] = (world - 1) * (shard_bytes + out_bytes) // world
    return case


# ---- sequence-parallel cases ------------------------------------------------------------------

def sp_ops_case(world: int, seed: int, batch: int = 2, seq_per_rank: int = 3, hidden: int = 5
                ) -> dict[str, Any]:
    seq = seq_per_rank * world
    xs = [randn(seed + r, batch, seq_per_rank, hidden) for r in range(world)]
    gather_grads = [randn(seed + 10 + r, batch, seq, hidden) for r in range(world)]
    partials = [randn(seed + 20 + r, batch, seq, hidden) for r in range(world)]
    rs_grads = [randn(seed + 30 + r, batch, seq_per_rank, hidden) for r in range(world)]
    total_grad = sum(gather_grads, torch.zeros_like(gather_grads[0]))
    full = torch.cat(xs, dim=1)
    summed = sum(partials, torch.zeros_like(partials[0]))
    return {"kind": "sp_ops", "xs": xs, "gather_grads": gather_grads, "partials": partials,
            "rs_grads": rs_grads,
            "expected": {"gather": full,
                         "gather_x_grad": shard(total_grad, world, dim=1),
                         "rs": shard(summed, world, dim=1),
                         "rs_x_grad": torch.cat(rs_grads, dim=1)}}



def sp_mlp_case(world: int, seed: int, batch: int = 2, seq_per_rank: int = 3, hidden: int = 6,
                ffn: int = 8) -> dict[str, Any]:
    seq = seq_per_rank * world
    x = randn(seed, batch, seq, hidden)
    params = {"ln_weight": 1 + 0.1 * randn(seed + 1, hidden), "ln_bias": randn(seed + 2, hidden),
              "w1": randn(seed + 3, ffn, hidden) * 0.4, "b1": randn(seed + 4, ffn),
              "w2": randn(seed + 5, hidden, ffn) * 0.4, "b2": randn(seed + 6, hidden)}
    grad = randn(seed + 7, batch, seq, hidden)
    leaves = {n: t.clone().requires_grad_() for n, t in params.items()}
    xl = x.clone().requires_grad_()
    y = dense_block(xl, *leaves.values())
    y.backward(grad)
    f = ffn // world
    per_rank = [{"ln_weight": params["ln_weight"], "ln_bias": params["ln_bias"],
                 "w1": params["w1"][r * f:(r + 1) * f].clone(),
                 "b1": params["b1"][r * f:(r + 1) * f].clone(),
                 "w2": params["w2"][:, r * f:(r + 1) * f].clone(), "b2": params["b2"]}
                for r in range(world)]
    g = {n: grad_of(t) for n, t in leaves.items()}
    expected = {"y": shard(y.detach(), world, 1), "x_grad": shard(grad_of(xl), world, 1),
                "w1_grad": [g["w1"][r * f:(r + 1) * f] for r in range(world)],
                "b1_grad": [g["b1"][r * f:(r + 1) * f] for r in range(world)],
                "w2_grad": [g["w2"][:, r * f:(r + 1) * f] for r in range(world)],
                "ln_weight_grad": g["ln_weight"], "ln_bias_grad": g["ln_bias"],
                "b2_grad": g["b2"]}
    return {"kind": "sp_mlp", "x": shard(x, world, 1), "grad": shard(grad, world, 1),
            "params": per_rank, "expected": expected}


# ---- the launches' cases ---------------------------------------------------------------------

def build(which: str) -> dict[str, dict]:
    cases: dict[str, dict] = {}
    if which == "ring2":
        cases.update(unit_cases())
        cases["ring float64"] = ring_case(2, batch=2, heads=2, seq=8, dim=4, dim_v=4,
                                          causal=False, seed=1000)
        cases["ring float64 causal dim_v=3"] = ring_case(2, batch=1, heads=3, seq=10, dim=5,
                                                         dim_v=3, causal=True, seed=1010)
        cases["ring float32 causal"] = ring_case(2, batch=2, heads=2, seq=12, dim=8, dim_v=8,
                                                 causal=True, seed=1020, dtype=torch.float32)
        cases["ring probe"] = ring_case(2, batch=1, heads=2, seq=8, dim=4, dim_v=6,
                                        causal=False, seed=1030, probe=True)
        cases["ring backward"] = ring_case(2, batch=1, heads=2, seq=8, dim=4, dim_v=3,
                                           causal=False, seed=1040, backward=True)
        cases["ring backward causal"] = ring_case(2, batch=2, heads=1, seq=6, dim=4, dim_v=4,
                                                  causal=True, seed=1050, backward=True)
        ops = sp_ops_case(2, 1100)
        cases["sp gather"] = {**ops, "kind": "sp_gather"}
        cases["sp rs"] = {**ops, "kind": "sp_rs"}
        cases["sp mlp"] = sp_mlp_case(2, 1110)
        cases["sp rs invalid"] = {"kind": "sp_rs_invalid", "expected": {}}
    elif which == "ring3":
        cases["ring float64 causal dim_v=6"] = ring_case(3, batch=1, heads=2, seq=9, dim=4,
                                                         dim_v=6, causal=True, seed=2000)
        cases["ring probe"] = ring_case(3, batch=1, heads=2, seq=9, dim=4, dim_v=4,
                                        causal=False, seed=2010, probe=True)
        cases["ring backward causal"] = ring_case(3, batch=1, heads=2, seq=9, dim=4, dim_v=5,
                                                  causal=True, seed=2020, backward=True)
    elif which == "ring4":
        cases["ring float64"] = ring_case(4, batch=1, heads=2, seq=16, dim=4, dim_v=4,
                                          causal=False, seed=3000)
        cases["ring float64 causal dim_v=7"] = ring_case(4, batch=2, heads=2, seq=12, dim=6,
                                                         dim_v=7, causal=True, seed=3010)
        cases["ring float32"] = ring_case(4, batch=1, heads=4, seq=16, dim=8, dim_v=8,
                                          causal=False, seed=3020, dtype=torch.float32)
        cases["ring probe"] = ring_case(4, batch=1, heads=2, seq=16, dim=4, dim_v=5,
                                        causal=False, seed=3030, probe=True)
        cases["ring probe causal"] = ring_case(4, batch=1, heads=2, seq=16, dim=4, dim_v=4,
                                               causal=True, seed=3040, probe=True)
        cases["ring backward causal"] = ring_case(4, batch=1, heads=2, seq=12, dim=4, dim_v=3,
                                                  causal=True, seed=3050, backward=True)
        ops = sp_ops_case(4, 3100)
        cases["sp gather"] = {**ops, "kind": "sp_gather"}
        cases["sp rs"] = {**ops, "kind": "sp_rs"}
        cases["sp mlp"] = sp_mlp_case(4, 3110)
        group_case = ring_case(3, batch=1, heads=2, seq=9, dim=4, dim_v=3, causal=True,
                               seed=3200)
        cases["ring group [1,2,3]"] = {**group_case, "kind": "ring_group", "members": [1, 2, 3]}
    elif which == "ulysses2":
        cases["ulysses"] = ulysses_case(2, batch=2, heads=4, seq=8, dim=4, dim_v=3,
                                        causal=False, seed=4000)
        cases["ulysses causal"] = ulysses_case(2, batch=1, heads=2, seq=10, dim=5, dim_v=5,
                                               causal=True, seed=4010)
        cases["heads=3"] = {"kind": "ulysses_heads", "heads": 3, "expected": {}}
    elif which == "ulysses4":
        # One large call: the bytes the kernel saw each rank write are this call's traffic.
        cases["ulysses causal large"] = ulysses_case(4, batch=1, heads=8, seq=512, dim=16,
                                                     dim_v=16, causal=True, seed=5000)
        cases["heads=6"] = {"kind": "ulysses_heads", "heads": 6, "expected": {}}
    else:
        raise ValueError(which)
    return cases


# ---- the launches -----------------------------------------------------------------------------

_CASES: dict[str, dict[str, dict]] = {}
_RUNS = Memo()


def strip(case: dict) -> dict:
    return {k: v for k, v in case.items() if k != "expected"}


def cases_for(which: str) -> dict[str, dict]:
    """The cases of one launch, built once per session (inputs and expected values)."""
    if which not in _CASES:
        _CASES[which] = build(which)
    return _CASES[which]


LAUNCHES = {  # name -> (world size, transport)
    "ring2": (2, TRANSPORT), "ring3": (3, TRANSPORT), "ring4": (4, TRANSPORT),
    "ulysses2": (2, TRANSPORT), "ulysses4": (4, TRANSPORT),
}


def run(launch: Any, impl: Any, which: str) -> Any:
    """The launch `which`, once per session and implementation; a case that hangs costs only
    itself (`harness.cases.launch_cases`)."""
    world, transport = LAUNCHES[which]

    def make() -> Any:
        cases = {name: strip(c) for name, c in cases_for(which).items()}
        return launch_cases(lambda env: launch(
            rank_all, world_size=world, args=(cases,), backend=BACKEND, transport=transport,
            timeout=_RUNS.timeout(TIMEOUT_S), env=env), list(cases))

    return _RUNS.get((str(impl.text), which), make)


def expected(which: str, name: str) -> dict:
    return cases_for(which)[name]["expected"]


def values(result: Any, name: str) -> list[Any]:
    return case_values(result.values, name)
