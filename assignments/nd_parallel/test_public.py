"""Public tests of nd_parallel (20 points): run `pytest assignments/nd_parallel`.

Two launches: one rank for the pure functions (the mesh's arithmetic, `shard_params`, the
planner on README §1's 70B example), and four ranks for `build_mesh` and `train_2d` on a
2×2 mesh. A part you have not written yet fails only its own test ("not implemented").
Training is compared with dense training computed here, in the parent, in float64; which
group each collective used is read from the wire log the harness's sidecar processes keep
outside the ranks. The hidden suite checks more shapes, 4×1, 1×4 and 2×2×2 meshes, the bytes
on each axis, and the planner on other models and clusters (README §9).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from assignments.nd_parallel._provided_checks import COMM_HINTS, MEMORY_HINTS
from grader.compare import Tolerance, assert_close, steps_bound
from grader.seeds import seeded_generator
from harness.cases import case_values, run_cases

F64 = torch.float64
WORLD = 4
MESH = {"dp": 2, "tp": 2}
BLOCKS, HIDDEN, FFN, BATCH, STEPS, LR, MOMENTUM = 2, 4, 8, 8, 3, 0.2, 0.9
PLANNER = Tolerance(rtol=0.01, atol=1e-12)  # README §6: within 1%

# README §1's example: a 70B model on 512 H100s, TP=8, PP=4, DP=16, ZeRO-1, 512 sequences.
LLAMA_70B = {"layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 8,
             "vocab": 32000, "seq": 4096}
LLAMA_8B = {"layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
            "vocab": 128256, "seq": 8192}


def h100(n: int) -> dict:
    return {"n_gpus": n, "gpus_per_node": 8, "gpu_memory": 80e9, "peak_flops": 400e12,
            "hbm_bw": 3.35e12, "intra_alpha": 5e-6, "intra_bw": 450e9, "inter_alpha": 10e-6,
            "inter_bw": 25e9}


LAYOUT = {"tp": 8, "pp": 4, "dp": 16, "zero": 1, "recompute": False, "micro_batch": 1}
README_NUMBERS = {  # README §1, in bytes and seconds
    "params": 68_976_648_192,
    "memory": {"weights": 4.311040512e9, "grads": 4.311040512e9, "optimizer": 1.616640192e9,
               "activations": 11.40850688e9, "total": 21.647228096e9},
    "comm": {"tp": 0.8473060238, "pp": 0.17243869184, "dp": 0.3236280384},
    "all_reduce 67.1 MB over 8 on NVLink": 3.3094444e-4,
    "bubble p=4 m=32": 3 / 35,
    "decode tp=8 batch=1 context=4096": 0.016407786790,
}


# ---- the parent's references ------------------------------------------------------------------

def randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


def dense_params(gen: torch.Generator) -> dict[str, torch.Tensor]:
    out = {}
    for i in range(BLOCKS):
        out[f"{i}.w1"] = randn(gen, FFN, HIDDEN) / math.sqrt(HIDDEN)
        out[f"{i}.b1"] = 0.1 * randn(gen, FFN)
        out[f"{i}.w2"] = randn(gen, HIDDEN, FFN) / math.sqrt(FFN)
        out[f"{i}.b2"] = 0.1 * randn(gen, HIDDEN)
    return out


def dense_train(params, x, y):
    """README §4's dense step, STEPS times (SGD with momentum)."""
    p, bufs = {k: v.clone() for k, v in params.items()}, {}
    for step in range(STEPS):
        leaves = {k: v.clone().requires_grad_() for k, v in p.items()}
        h = x[step]
        for i in range(BLOCKS):
            h = h + F.gelu(h @ leaves[f"{i}.w1"].T + leaves[f"{i}.b1"]) @ leaves[f"{i}.w2"].T \
                + leaves[f"{i}.b2"]
        grads = torch.autograd.grad(((h - y[step]) ** 2).mean(), list(leaves.values()))
        for name, g in zip(leaves, grads):
            bufs[name] = g.clone() if name not in bufs else bufs[name] * MOMENTUM + g
            p[name] = p[name] - LR * bufs[name]
    return p


def shard(params, j: int, t: int) -> dict[str, torch.Tensor]:
    """Megatron's cut: w1, b1 by rows, w2 by columns, b2 whole."""
    return {k: (v.clone() if k.endswith("b2") else
                v.chunk(t, dim=1 if k.endswith("w2") else 0)[j].clone())
            for k, v in params.items()}


def coords(rank: int, shape: dict) -> dict:
    """Row-major: itertools.product varies the last axis fastest."""
    return dict(zip(shape, list(itertools.product(*(range(n) for n in shape.values())))[rank]))


def group_of(shape: dict, axis: str, rank: int) -> list[int]:
    mine = coords(rank, shape)
    return [r for r in range(math.prod(shape.values()))
            if all(coords(r, shape)[a] == mine[a] for a in shape if a != axis)]


GEN = seeded_generator(2024)
PARAMS = dense_params(GEN)
X, Y = randn(GEN, STEPS, BATCH, HIDDEN), randn(GEN, STEPS, BATCH, HIDDEN)
FINAL = dense_train(PARAMS, X, Y)


# ---- what runs in the ranks -------------------------------------------------------------------

def rank_pure(ctx, params, layout, model70, model8, cluster512, cluster8):
    mesh = ctx.impl_module("nd_parallel", "mesh")
    train = ctx.impl_module("nd_parallel", "train")
    planner = ctx.impl_module("nd_parallel", "planner")
    from assignments.nd_parallel.specs import Cluster, Layout, Model

    m70, m8, lay = Model(**model70), Model(**model8), Layout(**layout)
    c512, c8 = Cluster(**cluster512), Cluster(**cluster8)
    shape = {"dp": 2, "tp": 2}

    def best():
        got = planner.best_layout(m8, c8, 64)
        return None if got is None else {k: getattr(got, k) for k in layout}

    return run_cases(ctx, [
        ("coords", lambda: [mesh.mesh_coords(r, shape) for r in range(4)]),
        ("rank", lambda: [mesh.mesh_rank({"dp": r // 2, "tp": r % 2}, shape) for r in range(4)]),
        ("groups", lambda: {a: mesh.axis_groups(shape, a) for a in shape}),
        ("shard", lambda: train.shard_params(params, 1, 2)),
        ("params", lambda: planner.param_count(m70)),
        ("memory", lambda: dict(planner.memory_per_gpu(m70, lay, 512))),
        ("collective", lambda: planner.collective_time("all_reduce", 67.1e6, 8, 5e-6, 450e9)),
        ("comm", lambda: dict(planner.comm_time(m70, c512, lay, 512))),
        ("bubble", lambda: planner.bubble_fraction(4, 32)),
        ("decode", lambda: planner.decode_latency(m70, c8, 8, 1, 4096)),
        ("best", best),
    ])


def rank_mesh_and_train(ctx, params, x, y):
    import torch.distributed as dist

    mesh_mod = ctx.impl_module("nd_parallel", "mesh")
    train = ctx.impl_module("nd_parallel", "train")

    def build():
        mesh = mesh_mod.build_mesh({"dp": 2, "tp": 2})
        out = {}
        for axis in ("dp", "tp"):
            mask = torch.tensor([1 << ctx.rank], dtype=torch.int64)
            ctx.mark(f"build {axis}")
            dist.all_reduce(mask, group=mesh.group(axis))
            ctx.mark("build end")
            out[axis] = int(mask.item())
        return out

    def train_2d():
        # The groups of the 2×2 mesh, made here: every rank creates every group, in order.
        groups = {}
        for axis, members_list in (("dp", [[0, 2], [1, 3]]), ("tp", [[0, 1], [2, 3]])):
            for members in members_list:
                g = ctx.new_group(members)
                if ctx.rank in members:
                    groups[axis] = g
        ctx.mark("train")
        out = train.train_2d(params, x.clone(), y.clone(), lr=0.2, momentum=0.9, steps=3,
                             tp_group=groups["tp"], dp_group=groups["dp"])
        ctx.mark("train end")
        return out

    return run_cases(ctx, [("build", build), ("train", train_2d)])


@pytest.fixture(scope="module")
def pure(launch):
    return launch(rank_pure, world_size=1,
                  args=(PARAMS, LAYOUT, LLAMA_70B, LLAMA_8B, h100(512), h100(8))).values


@pytest.fixture(scope="module")
def four(launch):
    return launch(rank_mesh_and_train, world_size=WORLD, args=(PARAMS, X, Y), backend="gloo",
                  transport="sidecar", timeout=120)


def one(outcomes, name):
    return case_values(outcomes, name)[0]


def close(got, want, what, hint):
    assert isinstance(got, (int, float)) and not isinstance(got, bool), (
        f"{what}: return a number — got {type(got).__name__}")
    assert_close(torch.tensor(float(got), dtype=F64), torch.tensor(float(want), dtype=F64),
                 what=what, tol=PLANNER, hint=hint)


# ---- the mesh ---------------------------------------------------------------------------------

@pytest.mark.points(1)
@pytest.mark.exercises("mesh_coords")
def test_mesh_coords_row_major(pure):
    got = one(pure, "coords")
    want = [coords(r, MESH) for r in range(4)]
    assert got == want, (f"mesh_coords on {MESH}: row-major, the last axis fastest — got {got}, "
                         f"expected {want}")


@pytest.mark.points(1)
@pytest.mark.exercises("mesh_rank")
def test_mesh_rank_inverts_coords(pure):
    got = one(pure, "rank")
    assert got == [0, 1, 2, 3], f"mesh_rank on {MESH}: rank = dp*2 + tp — got {got}"


@pytest.mark.points(2)
@pytest.mark.exercises("axis_groups")
def test_axis_groups_of_a_2x2_mesh(pure):
    got = one(pure, "groups")
    want = {"dp": [[0, 2], [1, 3]], "tp": [[0, 1], [2, 3]]}
    assert got == want, (f"axis_groups on {MESH}: tp groups are consecutive ranks (one node), "
                         f"dp groups strided — got {got}, expected {want}")


@pytest.mark.points(2)
@pytest.mark.exercises("build_mesh")
def test_build_mesh_groups_on_the_wire(four):
    got = case_values(four.values, "build")
    for r in range(WORLD):
        for axis in ("dp", "tp"):
            members = group_of(MESH, axis, r)
            assert got[r][axis] == sum(1 << m for m in members), (
                f"[rank {r} of 4] build_mesh group({axis!r}): must hold ranks {members} (an "
                f"all-reduce of 2^rank on it gave {got[r][axis]})")
            wire = [w for w in four.wire[r] if w.label == f"build {axis}"]
            assert wire and all(list(w.group_ranks) == members for w in wire), (
                f"[rank {r} of 4] build_mesh group({axis!r}): on the wire it held "
                f"{[list(w.group_ranks) for w in wire]}, expected {members}")


# ---- training ---------------------------------------------------------------------------------

ACT_BYTES = BATCH // MESH["dp"] * HIDDEN * 8  # one TP all-reduce: float64 [B/D, hidden]


def diagnosis(four, r: int) -> str:
    """What the wire says went wrong for rank r's train_2d, or "" (README §8's budget)."""
    groups = {a: tuple(group_of(MESH, a, r)) for a in MESH}
    records = [w for w in four.wire[r] if w.label == "train"]
    for w in records:
        if tuple(w.group_ranks) not in groups.values():
            return (f"[rank {r} of 4] train_2d: a {w.kind} ran on ranks {list(w.group_ranks)}, "
                    f"none of this rank's groups {groups}: TP on tp_group, gradients on dp_group")
    on_tp = [w for w in records if tuple(w.group_ranks) == groups["tp"]]
    if not on_tp:
        return (f"[rank {r} of 4] train_2d: nothing ran on the TP group {list(groups['tp'])}: "
                f"give tp_group (not a DP group) to the TP layers")
    odd = next((w for w in on_tp if w.bytes != ACT_BYTES), None)
    if odd is not None:
        return (f"[rank {r} of 4] train_2d: a {odd.bytes} B {odd.kind} ran on the TP group: "
                f"only the TP layers' {ACT_BYTES} B activations belong there (b2's gradient is "
                f"already whole on every TP rank)")
    return ""

@pytest.mark.points(2)
@pytest.mark.exercises("shard_params")
def test_shard_params_like_megatron(pure):
    got = one(pure, "shard")
    want = shard(PARAMS, 1, 2)
    assert isinstance(got, dict) and set(got) == set(want), f"shard_params: keys {sorted(want)}"
    for k in sorted(want):
        assert_close(got[k], want[k], what=f"shard_params(params, 1, 2)[{k!r}]",
                     hint="w1, b1: rows [j*ffn/T, (j+1)*ffn/T); w2: those columns; b2 whole")


@pytest.mark.points(1)
@pytest.mark.exercises("train_2d")
def test_train_2d_collectives_stay_in_their_groups(four):
    case_values(four.values, "train")
    for r in range(WORLD):
        cause = diagnosis(four, r)
        assert not cause, cause


@pytest.mark.points(3)
@pytest.mark.exercises("train_2d")
def test_train_2d_matches_dense_training(four):
    got = case_values(four.values, "train")
    tol = steps_bound(F64, steps=STEPS, depth_per_step=256,
                      magnitude=max(1.0, max(float(t.abs().max()) for t in FINAL.values())))
    for r in range(WORLD):
        want = shard(FINAL, coords(r, MESH)["tp"], 2)
        for k in sorted(want):
            assert_close(got[r][k], want[k], what=f"[rank {r} of 4] train_2d {k}", tol=tol,
                         hint=diagnosis(four, r) or "replica k trains on rows [k*B/D, "
                         "(k+1)*B/D); average gradients over dp_group only; SGD with momentum")


# ---- the planner (README §1's numbers) --------------------------------------------------------

DECODE_UNSPLIT = 0.0524403642035  # what you get when every GPU reads all the weights

@pytest.mark.points(1)
@pytest.mark.exercises("param_count")
def test_param_count_70b(pure):
    got = one(pure, "params")
    assert got == README_NUMBERS["params"], (
        f"param_count(70B): per layer 2h² + 2·h·h_kv + 3·h·f + 2h, plus 2·V·h + h — got {got}, "
        f"expected {README_NUMBERS['params']}")


@pytest.mark.points(2)
@pytest.mark.exercises("memory_per_gpu")
def test_memory_per_gpu_70b(pure):
    got = one(pure, "memory")
    for key, want in README_NUMBERS["memory"].items():
        close(got[key], want, f"memory_per_gpu(70B, tp=8 pp=4 dp=16 ZeRO-1)[{key!r}]",
              MEMORY_HINTS[key])


@pytest.mark.points(1)
@pytest.mark.exercises("collective_time")
def test_collective_time_all_reduce(pure):
    close(one(pure, "collective"), README_NUMBERS["all_reduce 67.1 MB over 8 on NVLink"],
          "collective_time('all_reduce', 67.1e6, 8, 5e-6, 450e9)",
          "2(k-1)·alpha + 2(k-1)/k·n/bw")


@pytest.mark.points(1)
@pytest.mark.exercises("comm_time")
def test_comm_time_70b(pure):
    got = one(pure, "comm")
    for key, want in README_NUMBERS["comm"].items():
        close(got[key], want, f"comm_time(70B)[{key!r}]", COMM_HINTS[key])


@pytest.mark.points(1)
@pytest.mark.exercises("bubble_fraction")
def test_bubble_fraction(pure):
    close(one(pure, "bubble"), README_NUMBERS["bubble p=4 m=32"], "bubble_fraction(4, 32)",
          "the bubble is (p-1)/(m+p-1) with p stages and m micro-batches (not swapped)")


@pytest.mark.points(1)
@pytest.mark.exercises("decode_latency")
def test_decode_latency_70b(pure):
    got = one(pure, "decode")
    unsplit = isinstance(got, float) and abs(got - DECODE_UNSPLIT) <= 0.01 * DECODE_UNSPLIT
    close(got, README_NUMBERS["decode tp=8 batch=1 context=4096"],
          "decode_latency(70B, tp=8, batch=1, context=4096)",
          "each GPU reads only 1/tp of the weights per token: divide the weight bytes by tp"
          if unsplit else "max(memory, flops) + 2·L all-reduces (README §7)")


@pytest.mark.points(1)
@pytest.mark.exercises("best_layout")
def test_best_layout_8b_on_8_gpus(pure):
    got = one(pure, "best")
    want = {"tp": 1, "pp": 1, "dp": 8, "zero": 2, "recompute": False, "micro_batch": 1}
    assert got == want, (
        f"best_layout(8B, 8 H100, 64 sequences): a layout must fit in memory before it is fast "
        f"(80 GB; ZeRO-0 and ZeRO-1 need more here) — got {got}, expected {want}")
