"""Every single-rank job of the hidden suite, built once at collection (one launch runs them
all: `jobs_result(launch)`), and their references, computed once in the parent."""

from __future__ import annotations

import functools
import random
from typing import Any

import torch

from assignments.serving.model import VOCAB_SIZE
from grader.seeds import seeded_generator
from grader.suites.serving._common import reference_outputs, run
from grader.suites.serving._gen import draw_ints, radix_ops, workload

MODEL_SEED = 3
SEEDS = draw_ints(12)


def engine_job(requests: list[dict], *, num_blocks: int, max_num_seqs: int,
               max_num_tokens: int, prefix_cache: bool = False, overlap: bool = False,
               arrive_at: list[int] | None = None) -> dict[str, Any]:
    return {"kind": "engine", "requests": requests, "num_blocks": num_blocks,
            "model_seed": MODEL_SEED, "arrive_at": arrive_at,
            "config": {"max_num_seqs": max_num_seqs, "max_num_tokens": max_num_tokens,
                       "prefix_cache": prefix_cache, "overlap": overlap}}


def _tight(requests: list[dict], extra: int) -> int:
    """A pool just above what the largest request needs, so several cannot run together."""
    return max(len(r["prompt"]) + r["max_tokens"] - 1 for r in requests) + extra


JOBS: dict[str, dict[str, Any]] = {}
for i in range(3):
    w = workload(SEEDS[i], 8)
    JOBS[f"roomy{i}"] = engine_job(w, num_blocks=400, max_num_seqs=4, max_num_tokens=16)
    JOBS[f"overlap_roomy{i}"] = engine_job(w, num_blocks=400, max_num_seqs=4,
                                           max_num_tokens=16, overlap=True)
for i in range(3):
    w = workload(SEEDS[3 + i], 10, max_tokens=(4, 14))
    JOBS[f"tight{i}"] = engine_job(w, num_blocks=_tight(w, 6), max_num_seqs=6,
                                   max_num_tokens=12)
    JOBS[f"overlap_tight{i}"] = engine_job(w, num_blocks=_tight(w, 6), max_num_seqs=6,
                                           max_num_tokens=12, overlap=True)
for i in range(2):
    w = workload(SEEDS[6 + i], 6, prompt=(5, 24))
    JOBS[f"chunked{i}"] = engine_job(w, num_blocks=400, max_num_seqs=3, max_num_tokens=4)
w = workload(SEEDS[8], 9)
JOBS["arrivals"] = engine_job(w, num_blocks=_tight(w, 10), max_num_seqs=3, max_num_tokens=6,
                              arrive_at=[0, 0, 1, 3, 3, 6, 10, 11, 20])
for i in range(2):
    w = workload(SEEDS[9 + i], 10, shared=10, prompt=(1, 8), max_tokens=(3, 10))
    JOBS[f"cache_tight{i}"] = engine_job(w, num_blocks=_tight(w, 8), max_num_seqs=4,
                                         max_num_tokens=8, prefix_cache=True)
    JOBS[f"overlap_cache_tight{i}"] = engine_job(w, num_blocks=_tight(w, 8), max_num_seqs=4,
                                                 max_num_tokens=8, prefix_cache=True,
                                                 overlap=True)
SHARED = workload(SEEDS[11], 8, shared=12, prompt=(1, 6), max_tokens=(2, 6), stop=0.0)
# 9 blocks, two running: admitting request 2 is short of blocks while its own prefix [13, 1]
# is the only unreferenced leaf; an admission that evicts before referencing its hit frees
# the blocks it is about to use (README §10, "Evicting your own hit").
JOBS["cache_own_hit"] = engine_job(
    [{"request_id": 0, "prompt": [13, 1, 12, 38, 12], "max_tokens": 2},
     {"request_id": 1, "prompt": [13, 1, 47], "max_tokens": 1},
     {"request_id": 2, "prompt": [13, 1, 38, 34, 44], "max_tokens": 3}],
    num_blocks=9, max_num_seqs=2, max_num_tokens=8, prefix_cache=True)
JOBS["prefix_serial"] = engine_job(SHARED, num_blocks=400, max_num_seqs=1, max_num_tokens=32,
                                   prefix_cache=True)
JOBS["prefix_on"] = engine_job(SHARED, num_blocks=400, max_num_seqs=4, max_num_tokens=32,
                               prefix_cache=True)
JOBS["prefix_off"] = engine_job(SHARED, num_blocks=400, max_num_seqs=4, max_num_tokens=32)


def conversation(seed: int, turns: int) -> list[dict]:
    """A chat: each turn's prompt is the previous turn's prompt + its output + new tokens,
    so the cache should hold all but the last token of every earlier turn."""
    rng = random.Random(seed)
    prompt = [rng.randrange(VOCAB_SIZE) for _ in range(6)]
    requests = []
    for turn in range(turns):
        spec = {"request_id": turn, "prompt": list(prompt), "max_tokens": rng.randint(2, 6)}
        requests.append(spec)
        output = reference_outputs([spec], MODEL_SEED)[turn]
        prompt = prompt + output + [rng.randrange(VOCAB_SIZE) for _ in range(rng.randint(1, 4))]
    return requests


JOBS["prefix_chat"] = engine_job(conversation(SEEDS[11] + 1, 5), num_blocks=400,
                                 max_num_seqs=1, max_num_tokens=64, prefix_cache=True)
JOBS["single"] = engine_job([{"request_id": 7, "prompt": list(range(10)), "max_tokens": 5}],
                            num_blocks=32, max_num_seqs=2, max_num_tokens=4)

# radix-cache operation sequences
for i, seed in enumerate(draw_ints(4)):
    JOBS[f"radix{i}"] = {"kind": "radix", "num_blocks": 256, "ops": radix_ops(seed, 40)}
JOBS["radix_lru"] = {"kind": "radix", "num_blocks": 64, "ops": [
    ("insert", [1, 2, 3, 4]), ("insert", [1, 2, 7, 7]), ("insert", [5, 5]),
    # uses the whole first path (a match ending inside [3, 4] would split it, and the lower
    # part [4] would keep its old stamp): the [7, 7] leaf is now the oldest
    ("match", [1, 2, 3, 4]),
    ("evict", 1), ("match", [1, 2, 7, 7]), ("match", [5, 5]), ("evict", 2),
    ("match", [1, 2, 3, 4]), ("match", [5, 5])]}
JOBS["radix_locked"] = {"kind": "radix", "num_blocks": 64, "ops": [
    ("insert", [3, 1, 4, 1, 5]), ("insert", [3, 1, 9]), ("lock", [3, 1, 4]),
    ("insert", [2, 7]), ("evict", 100), ("match", [3, 1, 4, 1, 5]), ("unlock", 0),
    ("evict", 100), ("match", [3, 1, 4])]}

# A held node split under its holder (match [1, 2] cuts [1, 2, 3, 4]): the holder's reference
# stays on the node it matched, the lower part; released, everything can be evicted.
JOBS["radix_split_held"] = {"kind": "radix", "num_blocks": 64, "ops": [
    ("insert", [1, 2, 3, 4]), ("lock", [1, 2, 3, 4]), ("match", [1, 2]), ("insert", [1, 2, 9]),
    ("evict", 100), ("unlock", 0), ("evict", 1 << 20)]}


def _logits(seed: int) -> torch.Tensor:
    return torch.randn(VOCAB_SIZE, generator=seeded_generator(seed), dtype=torch.float64) * 3


JOBS["sample"] = {"kind": "sample", "calls": [
    (_logits(s), {"request_id": 0, "prompt": [1], "max_tokens": 9, "temperature": t,
                  "seed": seed}, k)
    for s, t, seed, k in [(1, 0.0, 0, 0), (2, 0.0, 5, 3), (3, 0.7, 11, 0), (3, 0.7, 11, 4),
                          (4, 1.3, 2, 2), (5, 0.5, 999, 7)]]}
# (call, what it is, the outcome the contract asks for)
ERROR_CALLS = [
    (("limits", 5, 4), "Scheduler with max_num_seqs > max_num_tokens", "ValueError"),
    (("limits", 0, 4), "Scheduler with max_num_seqs = 0", "ValueError"),
    (("limits", 4, 4), "Scheduler with max_num_seqs == max_num_tokens", "ok"),
    (("engine_limits", 9, 8), "Engine with max_num_seqs > max_num_tokens", "ValueError"),
    (("add", 16, [{"request_id": 1, "prompt": [], "max_tokens": 2}]), "an empty prompt",
     "ValueError"),
    (("add", 16, [{"request_id": 1, "prompt": [1], "max_tokens": 0}]), "max_tokens = 0",
     "ValueError"),
    (("add", 16, [{"request_id": 1, "prompt": [1] * 10, "max_tokens": 8}]),
     "a request needing 17 blocks of 16", "ValueError"),
    (("add", 16, [{"request_id": 1, "prompt": [1] * 9, "max_tokens": 8}]),
     "a request needing exactly the 16 blocks of the pool", "ok"),
    (("add", 16, [{"request_id": 1, "prompt": [1], "max_tokens": 2},
                  {"request_id": 1, "prompt": [2], "max_tokens": 2}]),
     "a request id added twice", "ValueError"),
    (("insert_mismatch",), "RadixCache.insert of 3 tokens with 2 blocks", "ValueError"),
    (("dec_ref_twice",), "RadixCache.dec_ref below zero", "RuntimeError"),
    (("defaults",), "Engine(model)'s documented defaults, and stats() after one forward",
     "ok"),
]
JOBS["errors"] = {"kind": "errors", "calls": [call for call, _, _ in ERROR_CALLS]}

# Engine.generate itself, plain and overlapped (the tests above drive step())
for name in ("tight0", "cache_tight0"):
    for overlap in (False, True):
        job = dict(JOBS[name], kind="generate",
                   config=dict(JOBS[name]["config"], overlap=overlap))
        JOBS[f"generate_{name}_overlap={overlap}"] = job

# The budget's last token: three decodes leave one token for the chunked prompt.
JOBS["chunked_edge"] = engine_job(
    [{"request_id": i, "prompt": [i + 1], "max_tokens": 9} for i in range(3)]
    + [{"request_id": 3, "prompt": list(range(5, 17)), "max_tokens": 3}],
    num_blocks=64, max_num_seqs=4, max_num_tokens=4)


def jobs_result(launch: Any, impl: Any) -> dict[str, dict]:
    return run(launch, impl, "jobs", JOBS)


@functools.cache
def expected(name: str) -> dict[int, list[int]]:
    return reference_outputs(JOBS[name]["requests"], MODEL_SEED)
