"""The case tables of the nd_parallel suite (inputs only; expected values come from `_ref`).

Three launches: "pure" (1 rank: the mesh's pure functions, `shard_params`, the planner),
"four" (4 ranks, sidecar: `build_mesh` and `train_2d`), "eight" (8 ranks, sidecar:
`train_3d` on 2×2×2). Cheap cases first within each.
"""

from __future__ import annotations

from typing import Any

# ---- mesh, pure -------------------------------------------------------------------------------

SHAPES: dict[str, dict[str, int]] = {
    "dp=2,tp=2": {"dp": 2, "tp": 2},
    "x=8": {"x": 8},
    "dp=2,pp=3,tp=2": {"dp": 2, "pp": 3, "tp": 2},
    "a=1,b=4": {"a": 1, "b": 4},
    "a=3,b=1,c=2": {"a": 3, "b": 1, "c": 2},
    "tp=2,dp=3": {"tp": 2, "dp": 3},  # dict order, not the names, says which axis is inner
    "dp=2,pp=2,cp=2,tp=2": {"dp": 2, "pp": 2, "cp": 2, "tp": 2},
}
RESOLVE_OK: dict[str, tuple[dict[str, int], int]] = {
    "dp=-1,tp=2 world=8": ({"dp": -1, "tp": 2}, 8),
    "dp=2,tp=-1 world=6": ({"dp": 2, "tp": -1}, 6),
    "a=-1 world=5": ({"a": -1}, 5),
    "dp=2,pp=-1,tp=2 world=16": ({"dp": 2, "pp": -1, "tp": 2}, 16),
    "dp=2,tp=2 world=4": ({"dp": 2, "tp": 2}, 4),
}
RESOLVE_BAD: dict[str, tuple[dict[Any, Any], int]] = {  # keys of any type: one is an int
    "dp=3,tp=2 world=8": ({"dp": 3, "tp": 2}, 8),
    "dp=-1,tp=3 world=8": ({"dp": -1, "tp": 3}, 8),
    "a=-1,b=-1 world=4": ({"a": -1, "b": -1}, 4),
    "a=0,b=4 world=4": ({"a": 0, "b": 4}, 4),
    "empty world=1": ({}, 1),
    "a=2.0 world=2": ({"a": 2.0}, 2),
    "a=-2,b=-2 world=4": ({"a": -2, "b": -2}, 4),
    "a=True world=1 (bool)": ({"a": True}, 1),
    "empty axis name": ({"": 2}, 2),
    "axis name 1 (not a str)": ({1: 2}, 2),
}
COORDS_BAD: dict[str, tuple[int, dict[str, int]]] = {
    "rank=4 of dp=2,tp=2": (4, {"dp": 2, "tp": 2}),
    "rank=-1 of dp=2,tp=2": (-1, {"dp": 2, "tp": 2}),
    "rank=0 of a=0": (0, {"a": 0}),
    "rank=0 of a=-1,b=2 (-1 needs a world size)": (0, {"a": -1, "b": 2}),
}
RANK_BAD: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "dp=2 outside dp=2,tp=2": ({"dp": 2, "tp": 0}, {"dp": 2, "tp": 2}),
    "tp missing": ({"dp": 1}, {"dp": 2, "tp": 2}),
    "tp=-1": ({"dp": 0, "tp": -1}, {"dp": 2, "tp": 2}),
}
GROUPS_BAD: dict[str, tuple[dict[str, int], str]] = {
    "axis pp not in dp=2,tp=2": ({"dp": 2, "tp": 2}, "pp"),
    "a=-1,b=2 (-1 needs a world size)": ({"a": -1, "b": 2}, "a"),
}


def drawn_shapes() -> list[dict[str, int]]:
    """Shapes of 1 to 4 axes of sizes 1 to 4, drawn by hypothesis in the parent (same every run)."""
    from hypothesis import strategies as st

    from grader.seeds import hypothesis_examples

    sizes = st.lists(st.integers(1, 4), min_size=1, max_size=4)
    return [{f"ax{i}": n for i, n in enumerate(s)} for s in hypothesis_examples(sizes, 20, 3801)]


# ---- shard_params -----------------------------------------------------------------------------

SHARD_CASES: dict[str, dict[str, int]] = {
    "blocks=2,hidden=4,ffn=8,tp=2,rank=1": {"blocks": 2, "hidden": 4, "ffn": 8, "t": 2, "j": 1},
    "blocks=1,hidden=3,ffn=12,tp=4,rank=2": {"blocks": 1, "hidden": 3, "ffn": 12, "t": 4, "j": 2},
    "blocks=3,hidden=5,ffn=6,tp=1,rank=0": {"blocks": 3, "hidden": 5, "ffn": 6, "t": 1, "j": 0},
    "blocks=1,hidden=2,ffn=6,tp=3,rank=0": {"blocks": 1, "hidden": 2, "ffn": 6, "t": 3, "j": 0},
}
SHARD_BAD: dict[str, dict[str, int]] = {
    "ffn=6 over tp=4": {"blocks": 1, "hidden": 2, "ffn": 6, "t": 4, "j": 0},
    "rank=2 of tp=2": {"blocks": 1, "hidden": 2, "ffn": 4, "t": 2, "j": 2},
    "rank=-1 of tp=2": {"blocks": 1, "hidden": 2, "ffn": 4, "t": 2, "j": -1},
}

# ---- multi-rank: build_mesh and training ------------------------------------------------------

BUILD_4: dict[str, dict[str, int]] = {
    "dp=2,tp=2": {"dp": 2, "tp": 2},
    "tp=2,dp=2": {"tp": 2, "dp": 2},
    "dp=-1,tp=2": {"dp": -1, "tp": 2},
    "x=4": {"x": 4},
    "a=1,b=2,c=2": {"a": 1, "b": 2, "c": 2},
}
BUILD_4_BAD: dict[str, dict[str, int]] = {
    "dp=3,tp=2": {"dp": 3, "tp": 2},
    "dp=-1,tp=3": {"dp": -1, "tp": 3},
}
# (dp, tp) meshes of 4 ranks for train_2d; sizes of the model and the run.
TRAIN_2D: dict[str, dict[str, int]] = {
    "dp=2,tp=2": {"dp": 2, "tp": 2},
    "dp=4,tp=1": {"dp": 4, "tp": 1},
    "dp=1,tp=4": {"dp": 1, "tp": 4},
}
MODEL = {"blocks": 2, "hidden": 4, "ffn": 8, "batch": 8, "steps": 3}
LR, MOMENTUM = 0.2, 0.9
TRAIN_2D_BAD = {"batch=6 over dp=4": ({"dp": 4, "tp": 1}, 6)}
# (dp, zero, tp) meshes of 8 ranks for train_3d.
TRAIN_3D: dict[str, dict[str, int]] = {
    "dp=2,zero=2,tp=2": {"dp": 2, "zero": 2, "tp": 2},
    "dp=1,zero=2,tp=4": {"dp": 1, "zero": 2, "tp": 4},
}
# 17 local parameters (hidden 3, ffn 4, one block, tp 2) do not split over zero=2.
TRAIN_3D_BAD = {"17 local parameters over zero=2": {"blocks": 1, "hidden": 3, "ffn": 4,
                                                     "batch": 8, "steps": 1}}

# ---- planner ----------------------------------------------------------------------------------

GB = 1e9
MODELS: dict[str, dict[str, int]] = {
    "70B": {"layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 8,
            "vocab": 32000, "seq": 4096},
    "8B": {"layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
           "vocab": 128256, "seq": 8192},
    "8B-128K": {"layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                "vocab": 128256, "seq": 131072},
    "13B-MHA": {"layers": 40, "hidden": 5120, "ffn": 13824, "heads": 40, "kv_heads": 40,
                "vocab": 32000, "seq": 4096},
    "1B": {"layers": 16, "hidden": 2048, "ffn": 8192, "heads": 32, "kv_heads": 8,
           "vocab": 128256, "seq": 2048},
    "175B": {"layers": 96, "hidden": 12288, "ffn": 32768, "heads": 96, "kv_heads": 96,
             "vocab": 50257, "seq": 2048},
    # 36 heads: TP = 8 does not divide them.
    "7B-36-heads-16K": {"layers": 32, "hidden": 4608, "ffn": 12288, "heads": 36, "kv_heads": 4,
                        "vocab": 64000, "seq": 16384},
    "200B-36-heads": {"layers": 160, "hidden": 9216, "ffn": 36864, "heads": 36, "kv_heads": 4,
                      "vocab": 64000, "seq": 4096},
    # 13 layers: no pipeline on 8 GPUs, so only ZeRO can shard the state.
    "5B-13-layers": {"layers": 13, "hidden": 6144, "ffn": 16384, "heads": 48, "kv_heads": 8,
                     "vocab": 32000, "seq": 1024},
}


def h100(n: int) -> dict[str, float]:
    return {"n_gpus": n, "gpus_per_node": 8, "gpu_memory": 80 * GB, "peak_flops": 400e12,
            "hbm_bw": 3.35e12, "intra_alpha": 5e-6, "intra_bw": 450 * GB,
            "inter_alpha": 10e-6, "inter_bw": 25 * GB}


def a100_40(n: int) -> dict[str, float]:
    return {"n_gpus": n, "gpus_per_node": 4, "gpu_memory": 40 * GB, "peak_flops": 150e12,
            "hbm_bw": 1.5e12, "intra_alpha": 8e-6, "intra_bw": 200 * GB,
            "inter_alpha": 15e-6, "inter_bw": 12.5 * GB}


def pcie_16(n: int) -> dict[str, float]:
    """One 16 GB GPU per node: no NVLink, so TP is 1."""
    return {"n_gpus": n, "gpus_per_node": 1, "gpu_memory": 16 * GB, "peak_flops": 100e12,
            "hbm_bw": 0.5e12, "intra_alpha": 2e-6, "intra_bw": 16 * GB,
            "inter_alpha": 20e-6, "inter_bw": 12.5 * GB}


CLUSTERS: dict[str, dict[str, float]] = {
    "h100x512": h100(512), "h100x8": h100(8), "h100x64": h100(64),
    "a100-40x64": a100_40(64), "a100-40x16": a100_40(16), "h100x1024": h100(1024),
    "pcie16x8": pcie_16(8),
}


def lay(tp: int, pp: int, dp: int, zero: int = 0, recompute: bool = False,
        micro_batch: int = 1) -> dict[str, Any]:
    return {"tp": tp, "pp": pp, "dp": dp, "zero": zero, "recompute": recompute,
            "micro_batch": micro_batch}


# (model, cluster, layout, global batch): memory, comm and step time, by what they vary.
LAYOUTS: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "70B tp=8,pp=4,dp=16 zero=1": ("70B", "h100x512", lay(8, 4, 16, 1), 512),
    "70B tp=8,pp=4,dp=16 zero=0": ("70B", "h100x512", lay(8, 4, 16, 0), 512),
    "70B tp=8,pp=4,dp=16 zero=2": ("70B", "h100x512", lay(8, 4, 16, 2), 512),
    "70B tp=8,pp=4,dp=16 zero=3": ("70B", "h100x512", lay(8, 4, 16, 3), 512),
    "70B tp=8,pp=1,dp=64 zero=1 recompute": ("70B", "h100x512", lay(8, 1, 64, 1, True), 512),
    "70B tp=4,pp=8,dp=16 zero=1 m<p": ("70B", "h100x512", lay(4, 8, 16, 1), 64),
    "70B tp=2,pp=2,dp=128 zero=3 recompute": ("70B", "h100x512", lay(2, 2, 128, 3, True), 512),
    "13B tp=2,pp=2,dp=16 zero=1 a100 inter pp": ("13B-MHA", "a100-40x64", lay(2, 2, 16, 1), 256),
    "13B tp=4,pp=1,dp=16 zero=2 micro_batch=2": ("13B-MHA", "a100-40x64",
                                                 lay(4, 1, 16, 2, False, 2), 256),
    "1B tp=1,pp=1,dp=16 zero=0 a100": ("1B", "a100-40x16", lay(1, 1, 16, 0), 64),
    "1B tp=2,pp=2,dp=4 zero=1 recompute a100": ("1B", "a100-40x16", lay(2, 2, 4, 1, True), 64),
    "175B tp=8,pp=16,dp=8 zero=1 recompute": ("175B", "h100x1024", lay(8, 16, 8, 1, True), 1536),
    "8B tp=1,pp=1,dp=8 zero=2": ("8B", "h100x8", lay(1, 1, 8, 2), 64),
    "8B-128K tp=8,pp=1,dp=8 zero=1": ("8B-128K", "h100x64", lay(8, 1, 8, 1), 16),
}
LAYOUT_BAD: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "layers=80 over pp=3": ("70B", "h100x512", lay(8, 3, 16, 1), 480),
    "batch=100 over dp=16": ("70B", "h100x512", lay(8, 4, 16, 1), 100),
    "zero=4": ("70B", "h100x512", lay(8, 4, 16, 4), 512),
    "micro_batch=0": ("70B", "h100x512", lay(8, 4, 16, 1, False, 0), 512),
    "tp=0": ("70B", "h100x512", lay(0, 4, 16, 1), 512),
    "global batch 0": ("70B", "h100x512", lay(8, 4, 16, 1), 0),
}
COMM_BAD = {"tp*pp*dp=256 on 512 GPUs": ("70B", "h100x512", lay(8, 2, 16, 1), 512)}
COLLECTIVES: list[tuple[str, float, int, float, float]] = [
    ("all_reduce", 67.1e6, 8, 5e-6, 450e9), ("all_reduce", 4.3e9, 16, 1e-5, 25e9),
    ("all_gather", 1e9, 4, 1e-5, 50e9), ("reduce_scatter", 3e8, 64, 2e-5, 12.5e9),
    ("send", 67.1e6, 2, 1e-5, 25e9), ("all_reduce", 1e6, 1, 1e-5, 25e9),
    ("reduce_scatter", 5e5, 2, 1e-5, 25e9), ("all_gather", 0.0, 8, 3e-6, 450e9),
    ("send", 10.0, 2, 0.0, 0.5),
]
COLLECTIVES_BAD = [("broadcast", 1e6, 4, 1e-5, 1e9), ("all_reduce", 1e6, 0, 1e-5, 1e9),
                   ("all_gather", -1.0, 4, 1e-5, 1e9), ("reduce_scatter", 1e6, 4, 1e-5, 0.0)]
BUBBLES = [(4, 32), (1, 8), (8, 8), (2, 1), (16, 64), (3, 5)]
# Named scenarios for best_layout: (model, cluster, global batch, micro batch).
SCENARIOS: dict[str, tuple[str, str, int, int]] = {
    "70B on 512 H100": ("70B", "h100x512", 512, 1),
    "8B on 8 H100": ("8B", "h100x8", 64, 1),
    "8B at 128K tokens on 64 H100": ("8B-128K", "h100x64", 16, 1),
    "13B on 64 A100-40GB": ("13B-MHA", "a100-40x64", 256, 1),
    "1B on 16 A100-40GB micro_batch=2": ("1B", "a100-40x16", 64, 2),
    "175B on 16 A100-40GB (nothing fits)": ("175B", "a100-40x16", 64, 1),
    "5B-13-layers on 8 PCIe 16GB (ZeRO-3)": ("5B-13-layers", "pcie16x8", 16, 1),
    "8B at 128K tokens on 8 H100 (recompute)": ("8B-128K", "h100x8", 8, 1),
    "36 heads at 16K on 64 H100 (no TP=8)": ("7B-36-heads-16K", "h100x64", 16, 1),
    "8B on 8 H100, one sequence (dp=1: ZeRO stages tie)": ("8B", "h100x8", 1, 1),
}
# (model, cluster, tp, batch, context) for decode.
DECODES: dict[str, tuple[str, str, int, int, int]] = {
    "70B tp=1 batch=1": ("70B", "h100x8", 1, 1, 4096),
    "70B tp=2 batch=1": ("70B", "h100x8", 2, 1, 4096),
    "70B tp=8 batch=1": ("70B", "h100x8", 8, 1, 4096),
    "70B tp=4 batch=64 context=8192": ("70B", "h100x8", 4, 64, 8192),
    "8B tp=2 batch=256 (compute-bound)": ("8B", "h100x8", 2, 256, 512),
    "13B tp=8 a100 inter-node (tp > gpus_per_node)": ("13B-MHA", "a100-40x16", 8, 4, 2048),
}
DECODES_BAD = {"tp=0": ("70B", "h100x8", 0, 1, 4096), "batch=0": ("70B", "h100x8", 2, 0, 4096),
               "context=0": ("70B", "h100x8", 2, 1, 0)}
# (model, cluster, target s, batch, context) for min_tp_for_latency.
TARGETS: dict[str, tuple[str, str, float, int, int]] = {
    "70B target=20ms": ("70B", "h100x8", 0.020, 1, 4096),
    "70B target=50ms (memory decides)": ("70B", "h100x8", 0.050, 1, 4096),
    "8B target=10ms": ("8B", "h100x8", 0.010, 1, 4096),
    "70B target=5ms (none)": ("70B", "h100x8", 0.005, 1, 4096),
    "13B target=12ms a100": ("13B-MHA", "a100-40x16", 0.012, 8, 2048),
    "8B target=3.5ms": ("8B", "h100x8", 0.0035, 1, 4096),
    "200B 36 heads fits only at TP=8 (none)": ("200B-36-heads", "h100x8", 1.0, 1, 4096),
}
