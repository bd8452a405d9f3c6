"""The launches of the ddp hidden suite: the specs of every case, their data, and the four
launches, each shared by the test modules that read it (`harness.cases.Memo`), each a list of
cases in their own error scopes (`_ranks_launches.rank_cases`), grouped by the public names
they call so that a stubbed name costs only its own launches:

- "wrapper4" (4 ranks): SGD + momentum training, `no_sync`, bucket layouts, process subgroups;
- "wrapper2" (2 ranks): SGD training with one bucket, unused parameters, the bf16 hook,
  checkpoint resume;
- "trainer3" (3 ranks): `make_optimizer` + `train_step` with accumulation;
- "pure" (1 rank, in-rank transport): `get_lr`, `make_optimizer`'s groups, `train_step`'s
  error and one-micro-batch steps, a world of one, the default cap, and last, with the process
  group destroyed, the wrapper, the bf16 hook and checkpoints without any process group.

Multi-rank launches use the sidecar transport: the wire log (`result.wire`), written by the
sidecars outside the ranks, is what the communication tests count. Its records carry the
rank's latest mark, which the suite's own code sets (`_ranks.Probe`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from grader.seeds import drawn_integers, hypothesis_examples, seeded_generator, shifted
from grader.suites.ddp._ranks import build_model
from grader.suites.ddp._ranks_launches import rank_cases
from grader.suites.ddp._ref import expected_lr
from harness.cases import Memo, case_values, launch_cases
from harness.launcher import preload

preload("torch._dynamo")  # torch.optim's first use imports it: seconds per rank otherwise

LAUNCH_TIMEOUT = 60.0  # generous for a loaded 2-core machine; a spinning hook ends
TRANSPORT = "sidecar"
MB = 1024 * 1024

NET: dict[str, Any] = {"sizes": (6, 8, 3), "dtype": "float64"}
# float64 sizes in bytes, registration order: fc1.weight 384, fc1.bias 64, fc2.weight 512,
# fc2.bias 64, [norm.weight 64, norm.bias 64], head.weight 192, head.bias 24.
CAP_600 = 600 / MB

# -- specs of each case ------------------------------------------------------------------------
SGD4 = dict(NET, frozen=["fc2.bias"], cap_mb=CAP_600, optimizer="sgd",
            defaults={"lr": 0.1, "momentum": 0.9}, steps=4, rows=3)
# every rank's buffer its own (elsewhere it is the same on every rank): the buffer's broadcast
CONSTRUCT4 = dict(NET, rank_buffer=True, cap_mb=CAP_600, steps=1, rows=1)
NO_SYNC4 = dict(NET, cap_mb=CAP_600, steps=3, rows=2)  # the 3 "steps" are micro-batches
LAYOUT_SPECS = [
    dict(NET, frozen=["fc2.bias"], cap_mb=0.0),             # every parameter alone
    dict(NET, cap_mb=216 / MB),  # head.bias + head.weight fill it exactly
    dict(NET, cap_mb=CAP_600),
    dict(NET, norm=True, dtype="float32", cap_mb=25.0),     # one bucket
    {"arch": "tied", "sizes": (11, 4), "dtype": "float32", "cap_mb": 100 / MB},  # shared weight
    # 32-wide float64: each weight 8192 B, each bias 256 B
    dict(NET, sizes=(32, 32, 32), cap_mb=8448 / MB),  # buckets 0 and 1 both fill it exactly
    dict(NET, sizes=(32, 32, 32), cap_mb=8703 / MB),  # one byte short of head + fc2.bias
]
LAYOUT_POINTS = [1, 1, 1, 1, 1, 2, 1]


def random_layout_specs(seed: int, count: int = 40) -> list[dict]:
    """`count` specs from uniform seeded draws, then `count` drawn by hypothesis (see
    `hypothesis_picks`), the same on every run: see `layout_spec`. Made once per session and
    seed shift (each implementation's launch and test ask for them)."""
    return [dict(spec) for spec in _layout_specs(seed, count, shifted(0))]


@functools.cache
def _layout_specs(seed: int, count: int, shift_key: int) -> tuple[dict, ...]:
    gen = seeded_generator(seed)

    def uniform(n: int) -> int:
        return int(torch.randint(0, n, (1,), generator=gen))

    specs = [layout_spec(uniform) for _ in range(count)]
    specs += [layout_spec(_choices(values)) for values in hypothesis_picks(seed, count)]
    return tuple(specs)


def _choices(values: list[int]) -> Callable[[int], int]:
    """`pick(n)` that takes its choices from `values` in order."""
    stream = iter(values)
    return lambda n: next(stream) % n


PICKS_PER_SPEC = 64  # more than any spec consumes: 1 + 6 + 5 + 1 + 12 + 2 + 1


def hypothesis_picks(seed: int, count: int) -> list[list[int]]:
    """`count` lists of raw choices drawn with hypothesis in the parent (it favours zeros and
    small values: one-layer stacks, width 1, everything frozen, caps of 0)."""
    from hypothesis import strategies as st

    return hypothesis_examples(
        st.lists(drawn_integers(), min_size=PICKS_PER_SPEC, max_size=PICKS_PER_SPEC),
        count, seed)


def layout_spec(pick: Callable[[int], int]) -> dict:
    """A random stack of Linear layers (float32 or float64, some biases missing, some
    parameters frozen) with a cap drawn around the sums the packing rule compares: exactly a
    run of consecutive parameters, one byte less, one more, zero, or larger than the model.
    `pick(n)` is a choice in [0, n)."""
    depth = 1 + pick(5)
    widths = [1 + pick(12) for _ in range(depth + 1)]
    biases = [bool(pick(4)) for _ in range(depth)]
    dtype = ("float32", "float64")[pick(2)]
    spec: dict[str, Any] = {"arch": "seq", "widths": widths, "biases": biases, "dtype": dtype,
                            "cap_mb": 0.0}
    names = [n for n, _ in build_model(spec, 0).named_parameters()]
    spec["frozen"] = [n for n in names if pick(6) == 0]
    sizes = [p.numel() * p.element_size() for n, p in
             reversed(list(build_model(spec, 0).named_parameters()))
             if n not in spec["frozen"]]
    if sizes:
        start = pick(len(sizes))
        run = sum(sizes[start:start + 1 + pick(len(sizes) - start)])
        cap = (run, run - 1, run + 1, 0, 2 * sum(sizes))[pick(5)]
    else:
        cap = 1 + pick(100)
    spec["cap_mb"] = max(cap, 0) / MB
    return spec


RANDOM_LAYOUTS = 40
BIG = dict(NET, sizes=(2048, 2048, 2048), dtype="float32", cap_mb=25.0)  # 48 MiB: default cap
SGD2 = dict(NET, cap_mb=25.0, optimizer="sgd", defaults={"lr": 0.2}, steps=3, rows=4)
# ghost (never used) alone in bucket 0, ghost.weight last in it; the default find_unused
UNUSED_ERROR = dict(NET, ghost=True, cap_mb=144 / MB, find_unused=None, steps=1, rows=2)
# bucket 0 = ghost.bias, ghost.weight, extra.bias, extra.weight (360 B exactly): extra is used
# by rank 0 in the first backward only, so in the second its slot must be zeros again
FIND_UNUSED = dict(NET, extra=True, ghost=True, cap_mb=360 / MB, find_unused=True, steps=2,
                   rows=2)
# float32, bucket 0 = head.bias + head.weight (108 B): launched before the first layer
BF16 = dict(NET, dtype="float32", cap_mb=108 / MB, steps=1, rows=4)
SUBGROUPS = dict(NET, cap_mb=CAP_600, steps=1, rows=3)
ACCUMULATE = dict(NET, norm=True, cap_mb=CAP_600, micro=3, rows=2, steps=3,
                  defaults={"lr": 0.05, "weight_decay": 0.5}, schedule=(0.05, 0.005, 1, 3))
CHECKPOINT = dict(NET, dropout=0.25, cap_mb=CAP_600, steps=5, rows=2, save_after=3,
                  defaults={"lr": 0.02, "weight_decay": 0.1}, lrs=[0.02, 0.03, 0.02, 0.01, 0.01])
GROUPS = {"arch": "tied", "sizes": (11, 4), "dtype": "float32", "frozen": ["mix.bias"]}
GROUP_KWARGS = [{"lr": 0.01, "weight_decay": 0.05, "betas": (0.8, 0.9), "eps": 1e-6},
                {"lr": 0.003, "weight_decay": 0.1}]
LR_CONFIGS = [
    {"max_lr": 1.0, "min_lr": 0.1, "warmup_steps": 5, "total_steps": 20,
     "steps": [0, 1, 4, 5, 6, 12, 19, 20, 21, 100]},
    {"max_lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 0, "total_steps": 10,
     "steps": [0, 1, 5, 10, 11]},
    {"max_lr": 0.5, "min_lr": 0.0, "warmup_steps": 1, "total_steps": 2, "steps": [0, 1, 2, 3]},
]
LR_ERRORS = [
    {"max_lr": 1.0, "min_lr": 0.1, "warmup_steps": 5, "total_steps": 5, "steps": [0]},
    {"max_lr": 1.0, "min_lr": 0.1, "warmup_steps": -1, "total_steps": 5, "steps": [0]},
    {"max_lr": 1.0, "min_lr": 0.1, "warmup_steps": 2, "total_steps": 5, "steps": [-1]},
]
WORLD1 = dict(NET, norm=True, cap_mb=CAP_600, steps=1, rows=5)
SPARSE = dict(NET, extra=True, steps=2, rows=4, lrs=[0.05, 0.02],
              defaults={"lr": 0.05, "weight_decay": 0.1})
NO_GROUP = dict(NET, dropout=0.25, cap_mb=CAP_600, steps=2, rows=4)


# -- data --------------------------------------------------------------------------------------
def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def global_batches(spec: dict, seed: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [steps, world*(micro*)rows, in], y [..., out] in the spec's dtype."""
    gen = seeded_generator(seed)
    dtype = getattr(torch, spec["dtype"])
    n_in, _, n_out = spec["sizes"]
    rows = world_size * spec.get("micro", 1) * spec["rows"]
    steps = spec.get("steps", 1)
    return (_randn(gen, steps, rows, n_in, dtype=dtype), _randn(gen, steps, rows, n_out,
                                                               dtype=dtype))


def split_rows(x: torch.Tensor, world_size: int, micro: int | None = None) -> list[torch.Tensor]:
    """Rank r's rows of every step ([steps, rows, ...], or [steps, micro, rows, ...])."""
    per = x.shape[1] // world_size
    parts = [x[:, r * per:(r + 1) * per].clone() for r in range(world_size)]
    if micro is None:
        return parts
    return [p.reshape(p.shape[0], micro, per // micro, *p.shape[2:]) for p in parts]


def init_seed(base: int, rank: int) -> int:
    """Each rank builds its replica from its own seed: the wrapper must broadcast rank 0's."""
    return shifted(base) + 1009 * rank


# -- launches ----------------------------------------------------------------------------------
@dataclass
class Launch:
    outcomes: list[dict]  # per rank: {case name: outcome}
    wire: list[list[Any]] | None  # per rank: WireRecord list (sidecar), else None
    inputs: dict[str, Any]  # per case: what the parent generated (global data, seeds)
    world_size: int

    def values(self, name: str, what: str | None = None) -> list[Any]:
        return case_values(self.outcomes, name, what)

    def wire_by_label(self, rank: int) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for record in (self.wire or [[]] * self.world_size)[rank]:
            out.setdefault(record.label, []).append(record)
        return out


_LAUNCHES = Memo()  # no shorter limit after a hang: the stall watch finds deadlocks


def _train_data(spec: dict, seed: int, world_size: int) -> tuple[dict, list[dict]]:
    x, y = global_batches(spec, seed + 1, world_size)
    micro = spec.get("micro")  # [steps, micro, rows, ...] per rank for train_step
    xs, ys = split_rows(x, world_size, micro), split_rows(y, world_size, micro)
    shared = {"x": x, "y": y, "seed": init_seed(seed, 0)}
    per_rank = [{"x": xs[r], "y": ys[r], "init_seed": init_seed(seed, r),
                 "rng_seed": shifted(seed) + 7 + 131 * r} for r in range(world_size)]
    return shared, per_rank


def _launch(launch: Callable[..., Any], impl: str, key: str, world_size: int,
            cases: list[tuple[dict, dict | None, int]], transport: str = TRANSPORT) -> Launch:
    """cases: (case dict, spec with data or None, seed). One launch, every case in it."""
    def make() -> Launch:
        inputs: dict[str, Any] = {}
        rank_data: list[dict[str, Any]] = [{} for _ in range(world_size)]
        for case, spec, seed in cases:
            if spec is None:
                continue
            shared, per_rank = _train_data(spec, seed, world_size)
            inputs[case["name"]] = shared
            for r in range(world_size):
                rank_data[r][case["name"]] = per_rank[r]
        # A case that hangs or ends the launch costs only itself (harness.cases.launch_cases).
        result = launch_cases(lambda env: launch(
            rank_cases, world_size=world_size, args=([c for c, _, _ in cases],),
            rank_args=[(rank_data[r],) for r in range(world_size)], transport=transport,
            timeout=LAUNCH_TIMEOUT, env=env), [c["name"] for c, _, _ in cases])
        return Launch(result.values, result.wire, inputs, world_size)

    return _LAUNCHES.get((impl, key), make)


def wrapper4(launch: Callable[..., Any], impl: str) -> Launch:
    return _launch(launch, impl, "wrapper4", 4, [
        ({"name": "sgd4", "kind": "train", "spec": SGD4}, SGD4, 41),
        ({"name": "nosync4", "kind": "no_sync", "spec": NO_SYNC4}, NO_SYNC4, 42),
        ({"name": "layouts", "kind": "layouts", "specs": LAYOUT_SPECS, "seed": 43}, None, 43),
        ({"name": "subgroups", "kind": "subgroups", "spec": SUBGROUPS}, SUBGROUPS, 44),
        ({"name": "construct4", "kind": "construct", "spec": CONSTRUCT4}, CONSTRUCT4, 45),
    ])


def wrapper2(launch: Callable[..., Any], impl: str) -> Launch:
    return _launch(launch, impl, "wrapper2", 2, [
        ({"name": "sgd2", "kind": "train", "spec": SGD2}, SGD2, 21),
        ({"name": "unused_error", "kind": "unused", "spec": UNUSED_ERROR}, UNUSED_ERROR, 22),
        ({"name": "find_unused", "kind": "unused", "spec": FIND_UNUSED}, FIND_UNUSED, 23),
        ({"name": "bf16", "kind": "bf16", "spec": BF16}, BF16, 24),
        ({"name": "checkpoint", "kind": "checkpoint", "spec": CHECKPOINT}, CHECKPOINT, 32),
    ])


def accumulate_lrs() -> list[float]:
    max_lr, min_lr, warmup, total = ACCUMULATE["schedule"]
    return [expected_lr(s, max_lr, min_lr, warmup, total) for s in range(ACCUMULATE["steps"])]


def trainer3(launch: Callable[..., Any], impl: str) -> Launch:
    spec = dict(ACCUMULATE, lrs=accumulate_lrs())
    return _launch(launch, impl, "trainer3", 3, [
        ({"name": "accumulate", "kind": "accumulate", "spec": spec}, spec, 31),
    ])


def pure(launch: Callable[..., Any], impl: str) -> Launch:
    return _launch(launch, impl, "pure", 1, [
        ({"name": "lr", "kind": "lr", "configs": LR_CONFIGS + LR_ERRORS}, None, 0),
        ({"name": "groups", "kind": "groups", "spec": GROUPS, "seed": 11,
          "kwargs": GROUP_KWARGS[0]}, None, 0),
        ({"name": "groups_defaults", "kind": "groups", "spec": dict(NET, norm=True),
          "seed": 12, "kwargs": GROUP_KWARGS[1]}, None, 0),
        ({"name": "empty", "kind": "train_step_empty", "spec": NET, "seed": 13}, None, 0),
        ({"name": "world1", "kind": "world_of_one", "spec": WORLD1}, WORLD1, 14),
        ({"name": "default_cap", "kind": "default_cap", "spec": BIG}, None, 0),
        ({"name": "random_layouts", "kind": "random_layouts", "seed": 19,
          "specs": random_layout_specs(61, RANDOM_LAYOUTS)}, None, 0),
        ({"name": "sparse", "kind": "train_step_sparse", "spec": SPARSE}, SPARSE, 15),
        # the last ones: they destroy the process group first
        ({"name": "no_group_wrapper", "kind": "no_group_wrapper", "spec": WORLD1}, WORLD1, 16),
        ({"name": "no_group_bf16", "kind": "no_group_bf16", "spec": BF16}, BF16, 17),
        ({"name": "no_group_trainer", "kind": "no_group_trainer", "spec": NO_GROUP}, NO_GROUP,
         18),
    ], transport="in-rank")
