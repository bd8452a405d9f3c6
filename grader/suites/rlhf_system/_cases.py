"""Case tables and the suite's launches (each once per implementation, shared by the tests).

Inputs are drawn in the parent (`grader.seeds`); the launches get them and return values the
tests judge against `_ref`. Multi-rank launches run over the sidecars, and their wire logs
(`harness.commlog.as_log`) are what the tests count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from assignments.rlhf_system import toy
from grader.seeds import hypothesis_examples, seeded_generator, shifted
from grader.suites.rlhf_system import _ranks
from harness.cases import Memo, launch_cases
from harness.commlog import CommRecord, as_log
from harness.launcher import preload

preload("torch._dynamo")  # torch.optim imports it on first use: once in the forkserver
LAUNCH_TIMEOUT = 60.0
ITERATIONS = 10
LEARN_THRESHOLD = 0.25  # README §9: twice a random policy's expected score (0.125)
BUCKET_BYTES = 17000


@dataclass
class Run:
    values: list[Any]  # per rank: what run_cases returned
    wire: list[list[CommRecord]] | None  # per rank, what the sidecars carried


_RUNS = Memo(hang_timeout=20.0)


def tiny_state(seed: int, vocab: int = 8, hidden: int = 8, critic: bool = False
               ) -> dict[str, torch.Tensor]:
    """A TinyPolicy (or TinyCritic) state with every entry drawn, buffers included."""
    g = seeded_generator(seed)
    model = (toy.TinyCritic if critic else toy.TinyPolicy)(vocab, hidden)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for k, v in state.items():
        if v.is_floating_point():
            state[k] = torch.randn(v.shape, generator=g) * 0.7
    state["num_updates"] = torch.tensor(int(torch.randint(1, 1000, (), generator=g)))
    return state


# ---- the computation flow: one launch, one rank ---------------------------------------------

KL_MASKS = {"full": [3, 3, 3], "ragged": [1, 4, 2], "one_token": [1, 1, 1]}
GAE_PARAMS = {"gamma=1-lam=0.95": (1.0, 0.95), "lam=0": (0.9, 0.0), "lam=1": (1.0, 1.0),
              "ragged-gamma=0.8": (0.8, 0.9), "one_token-gamma=0.9": (0.9, 0.95)}
GAE_LENGTHS = {"ragged": [2, 5, 3, 1], "one_token": [1, 1, 1, 1]}


def _mask(lengths: list[int], T: int) -> torch.Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]


def flow_calls() -> list[tuple[str, str, dict[str, Any]]]:
    g = seeded_generator(4300)
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for name, lengths in KL_MASKS.items():
        T = max(lengths)
        for beta in (0.1, 0.0):
            calls.append((f"kl/{name}/beta={beta}", "kl", dict(
                logprobs=-torch.rand(3, T, generator=g) * 3, ref=-torch.rand(3, T, generator=g) * 3,
                scores=torch.rand(3, generator=g) + 0.5, mask=_mask(lengths, T), beta=beta)))
    for name, (gamma, lam) in GAE_PARAMS.items():
        lengths = GAE_LENGTHS.get(name.split("-")[0], [4, 4, 4, 4])
        T = max(lengths)
        calls.append((f"gae/{name}", "gae", dict(
            rewards=torch.randn(4, T, generator=g), values=torch.randn(4, T, generator=g),
            mask=_mask(lengths, T), gamma=gamma, lam=lam)))
    for group, n in ((4, 12), (2, 6), (8, 16)):
        calls.append((f"grpo/group={group}", "grpo", dict(
            scores=torch.rand(n, generator=g), group=group)))
    calls.append(("grpo/equal_scores", "grpo", dict(
        scores=torch.tensor([0.5, 0.5, 0.5, 0.25, 0.75, 0.5]), group=3)))
    calls.append(("grpo/eps=0.5", "grpo", dict(scores=torch.rand(8, generator=g), group=4,
                                                kw={"eps": 0.5})))
    for name, (n, group) in {"group=1": (4, 1), "ragged": (10, 4)}.items():
        calls.append((f"grpo_error/{name}", "grpo_error", dict(scores=torch.rand(n), group=group)))
    sharp = tiny_state(4301)
    sharp["head.weight"] *= 2.0
    calls.append(("generate/distribution", "generate", dict(
        state=sharp, prompts=torch.full((1500,), 3), T=2, seed=shifted(11))))
    calls.append(("generate/mixed_prompts", "generate", dict(
        state=tiny_state(4302), prompts=torch.arange(24) % 8, T=4, seed=shifted(12))))
    calls.append(("seqlp", "seqlp", dict(state=tiny_state(4303), prompts=torch.arange(10) % 8,
                                         responses=torch.randint(0, 8, (10, 4), generator=g))))
    for adv in ("grpo", "gae"):
        cfg: dict[str, Any] = dict(vocab=8, hidden=8, response_len=3, prompts_per_rank=3,
                                   group_size=4, advantage=adv, kl_coef=0.3, gamma=0.9,
                                   lam=0.8)
        calls.append((f"experience/{adv}", "experience", dict(
            cfg=cfg, actor=tiny_state(4304), frozen=tiny_state(4305),
            critic=tiny_state(4306, critic=True), seed=shifted(13), version=5,
            prompts=toy.make_prompts(toy.RLHFConfig(**cfg), 0, 0))))
    for adv in ("gae", "grpo"):
        B, T = 8, 3
        prompts, responses = torch.arange(B) % 8, torch.randint(0, 8, (B, T), generator=g)
        calls.append((f"train/{adv}", "train", dict(
            cfg=dict(vocab=8, hidden=8, response_len=T, advantage=adv, lr=0.05, clip=0.2,
                     ppo_epochs=2),
            actor=tiny_state(4311), critic=tiny_state(4312, critic=True),
            exp=dict(prompts=prompts, responses=responses, mask=torch.ones(B, T, dtype=torch.bool),
                     old_logprobs=-torch.rand(B, T, generator=g) * 2 - 1.0,
                     ref_logprobs=-torch.rand(B, T, generator=g) * 2,
                     values=torch.randn(B, T, generator=g), scores=torch.rand(B, generator=g),
                     rewards=torch.randn(B, T, generator=g),
                     advantages=torch.randn(B, T, generator=g),
                     returns=torch.randn(B, T, generator=g) if adv == "gae" else None))))
    calls.append(("manifest", "manifest", dict(state=tiny_state(4307))))
    for i, (manifest, limit) in enumerate(manifest_examples()):
        calls.append((f"buckets/drawn-{i}", "buckets", dict(manifest=manifest, limit=limit)))
    calls.append(("buckets/readme", "buckets", dict(manifest=README_MANIFEST, limit=10000)))
    calls.append(("buckets/exact_fit", "buckets", dict(manifest=README_MANIFEST[:2], limit=12000)))
    calls.append(("buckets/empty", "buckets", dict(manifest=[], limit=10)))
    calls.append(("buckets_error/too_large", "buckets_error",
                  dict(manifest=README_MANIFEST, limit=7999)))
    calls.append(("buckets_error/zero", "buckets_error", dict(manifest=README_MANIFEST, limit=0)))
    calls.append(("buckets_error/zero_empty", "buckets_error", dict(manifest=[], limit=0)))
    full = tiny_state(4308)
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight"):
        for tp_size, tp_rank in ((2, 1), (4, 2)):
            calls.append((f"shard/{name}/tp={tp_rank}of{tp_size}", "shard", dict(
                name=name, tensor=full[name], tensor_copy=full[name].clone(),
                tp_rank=tp_rank, tp_size=tp_size)))
    calls.append(("shard_error/indivisible", "shard_error", dict(
        name="fc1.weight", tensor=torch.zeros(6, 4), tp_rank=0, tp_size=4)))
    calls.append(("shard_error/rank", "shard_error", dict(
        name="fc2.weight", tensor=torch.zeros(4, 8), tp_rank=2, tp_size=2)))
    return calls


README_MANIFEST = [("a", (1000,), "torch.float32"), ("b", (2000,), "torch.float32"),
                   ("c", (), "torch.int64"), ("d", (500,), "torch.float32")]
_DRAWN: list[tuple[list[tuple[str, tuple[int, ...], str]], int]] = []


def manifest_examples() -> list[tuple[list[tuple[str, tuple[int, ...], str]], int]]:
    """Manifests drawn by hypothesis in the parent (shapes, dtypes, a limit that fits all)."""
    if not _DRAWN:
        from hypothesis import strategies as st

        entry = st.tuples(st.lists(st.integers(0, 6), max_size=3),
                          st.sampled_from(["torch.float32", "torch.int64", "torch.bfloat16",
                                           "torch.uint8"]))
        drawn = hypothesis_examples(st.tuples(st.lists(entry, min_size=1, max_size=9),
                                              st.integers(0, 200)), 20, 4310)
        for entries, slack in drawn:
            manifest = [(f"t{i}", tuple(shape), dtype) for i, (shape, dtype) in enumerate(entries)]
            from grader.suites.rlhf_system._ref import entry_bytes

            largest = max(entry_bytes(s, d) for _, s, d in manifest)
            _DRAWN.append((manifest, max(1, largest + slack)))
    return _DRAWN


FLOW_MAX_LEFT_OUT = 2


def flow_run(launch: Any, impl: str) -> dict[str, Any]:
    def make() -> Any:
        calls = flow_calls()
        # A call that hangs (a loop that never ends) costs only itself: the limit ends the
        # launch, which is made again without it (harness.cases.launch_cases); after
        # FLOW_MAX_LEFT_OUT such calls the next fails every call (one limit per call is too
        # much for a bug that loops in every call).
        result = launch_cases(lambda env: launch(
            _ranks.rank_flow, world_size=1, args=(calls,), timeout=LAUNCH_TIMEOUT, env=env),
            [name for name, _, _ in calls], max_left_out=FLOW_MAX_LEFT_OUT)
        return {"calls": {name: spec for name, _, spec in calls}, "out": result.values[0]}

    return _RUNS.get((impl, "flow"), make)


# ---- weight sync: one 4-rank launch over the sidecars ---------------------------------------

TP_PLAN = _ranks.TP_PLAN


def _shapes(state: dict[str, torch.Tensor], tp_rank: int = 0, tp_size: int = 1
            ) -> dict[str, tuple[list[int], str]]:
    from grader.suites.rlhf_system._ref import tp_slice

    return {k: (list(tp_slice(k, v, tp_rank, tp_size, TP_PLAN).shape if tp_size > 1
                     else v.shape), str(v.dtype)) for k, v in state.items()}


def sync_cases() -> list[dict[str, Any]]:
    """The syncs of the launch, in order: names say what they vary."""
    first, second = tiny_state(4320, hidden=32), tiny_state(4321, hidden=32)
    full = {"tp_size": 1, "tp_rank": 0}

    def case(name: str, state: dict[str, torch.Tensor], dst: list[int], recv: dict[int, dict],
             version: int, bucket_bytes: int = BUCKET_BYTES, **extra: Any) -> dict[str, Any]:
        return dict(name=name, src=0, state=state, state_copy={k: v.clone() for k, v in
                                                               state.items()},
                    dst=dst, recv=recv, version=version, bucket_bytes=bucket_bytes, **extra)

    every = {r: dict(full, shapes=_shapes(first)) for r in (1, 2, 3)}
    g = seeded_generator(4322)
    # Mixed dtypes in one bucket: "b" starts at byte 3 of it, "c" at byte 23, "d" at byte 29,
    # none aligned to its element size.
    mixed = {"a": torch.randint(0, 256, (3,), generator=g, dtype=torch.uint8),
             "b": torch.randn(5, generator=g), "c": torch.randn(3, generator=g).bfloat16(),
             "d": torch.randint(-1000, 1000, (2,), generator=g),
             "e": torch.randn(2, 3, generator=g)}
    return [
        case("full-3_receivers-v7", first, [1, 2, 3], every, 7),
        case("full-again-v8", second, [3, 1], {r: dict(full, shapes=_shapes(second))
                                               for r in (1, 3)}, 8),
        case("tp-2_slices-plus_full", first, [1, 2, 3], {
            1: dict(full, shapes=_shapes(first)),
            2: dict(tp_rank=0, tp_size=2, shapes=_shapes(first, 0, 2)),
            3: dict(tp_rank=1, tp_size=2, shapes=_shapes(first, 1, 2))}, 9),
        case("small_buckets-B=16896", second, [2], {2: dict(full, shapes=_shapes(second))}, 10,
             bucket_bytes=4096 * 4 + 512),
        case("bad_bucket-too_small", first, [1], {}, 11, bucket_bytes=1000, expect_error=True),
        case("bad_manifest-renamed", first, [1], {1: dict(full, shapes={
            ("renamed" if k == "fc2.bias" else k): v for k, v in _shapes(first).items()})},
             12, expect_recv_error=True),
        case("after_bad-v13", second, [1, 2], {r: dict(full, shapes=_shapes(second))
                                               for r in (1, 2)}, 13),
        case("mixed_dtypes-unaligned-v14", mixed, [3], {3: dict(full, shapes=_shapes(mixed))}, 14),
    ]


def sync_run(launch: Any, impl: str) -> tuple[list[dict[str, Any]], Run]:
    def make() -> Any:
        cases = sync_cases()
        # A sync that hangs (a receiver waiting for a bucket never sent) costs only itself
        # (harness.cases.launch_cases).
        result = launch_cases(lambda env: launch(
            _ranks.rank_sync, world_size=4, args=(cases,), timeout=LAUNCH_TIMEOUT,
            transport="sidecar", env=env), [c["name"] for c in cases])
        return cases, Run(result.values, [as_log(w) for w in result.wire])

    return _RUNS.get((impl, "sync"), make)


# ---- the placements: one 4-rank launch each, over the sidecars ------------------------------

PLACEMENT_CFG: dict[str, Any] = {"seed": 0}
GAE_ITERATIONS = 3  # co-located with a critic: a short run, judged on agreement, not learning
TRAINERS, ROLLOUTS = [0, 1], [2, 3]


def colocated_run(launch: Any, impl: str) -> Run:
    def make() -> Any:
        result = launch_cases(lambda env: launch(
            _ranks.rank_colocated, world_size=4, args=(PLACEMENT_CFG, ITERATIONS, GAE_ITERATIONS),
            timeout=LAUNCH_TIMEOUT, transport="sidecar", env=env), _ranks.COLOCATED_CASES)
        return Run(result.values, [as_log(w) for w in result.wire])

    return _RUNS.get((impl, "colocated"), make)


def disaggregated_run(launch: Any, impl: str) -> Run:
    def make() -> Any:
        result = launch_cases(lambda env: launch(
            _ranks.rank_disaggregated, world_size=4,
            args=(PLACEMENT_CFG, ITERATIONS, TRAINERS, ROLLOUTS), timeout=LAUNCH_TIMEOUT,
            transport="sidecar", env=env), _ranks.DISAGGREGATED_CASES)
        return Run(result.values, [as_log(w) for w in result.wire])

    return _RUNS.get((impl, "disaggregated"), make)
