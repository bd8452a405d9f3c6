"""The cases of the serving hidden suite: random workloads and radix-cache operation sequences,
every single-rank job built from them once at collection, and the launch that runs them.

Hypothesis draws integers (derandomized, no example database, a small fixed number of
examples), and each integer seeds a `random.Random` that builds one workload or sequence, so
the draws are the same on every run and the suite stays cheap. Hypothesis only generates
here; the examples are batched into one launch and judged afterwards (no shrinking).

`JOBS` holds every job (one launch runs them all: `jobs_result(launch, impl)`, shared through
`MEMO` by every test that asks with the same implementation under test); `expected(name)` is a
job's reference outputs, computed once in the parent.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from assignments.serving.model import VOCAB_SIZE
from grader.seeds import seeded_generator
from grader.suites.serving._ranks import rank_jobs
from grader.suites.serving._ref import reference_outputs
from harness.cases import Memo, case_value, launch_cases

JOB_TIMEOUT = 75.0  # the launch takes ~5 s idle, ~25 s on a loaded machine; a stuck loop fails


# -- parent side: launches -------------------------------------------------------------------------
MEMO = Memo()
# A job that loops for ever is ended by the launch's limit and the launch is made again without
# it (harness.cases.launch_cases), so it costs only itself; after this many such jobs the next
# one fails every job of the launch, as a bug that loops in every job would otherwise cost one
# limit per job.
MAX_LEFT_OUT = 2


def run(launch: Callable[..., Any], impl: Any, key: str, jobs: dict[str, dict]
        ) -> dict[str, dict]:
    """One launch of one rank for `jobs`, shared by every test that asks for `key` with the
    same implementation under test (a session may grade several); a job that hangs costs only
    itself (see MAX_LEFT_OUT)."""
    return MEMO.get((impl.argument, key), lambda: launch_cases(
        lambda env: launch(rank_jobs, world_size=1, args=(jobs,), timeout=JOB_TIMEOUT, env=env),
        list(jobs), max_left_out=MAX_LEFT_OUT).values[0])


def value(outcomes: dict[str, dict], name: str, what: str) -> Any:
    return case_value(outcomes[name], what)


# Hypothesis may draw integer literals it finds in loaded modules' source, which differ with
# what is loaded; drawing from a range no literal falls in keeps the draws the same.
DRAW_OFFSET = 5 * 10**40


def draw_ints(count: int) -> list[int]:
    """`count` integers, the same ones on every run."""
    drawn: list[int] = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.integers(DRAW_OFFSET, DRAW_OFFSET + 2**48))
    def collect(value: int) -> None:
        if len(drawn) < count:
            drawn.append(value - DRAW_OFFSET)

    collect()
    while len(drawn) < count:  # hypothesis may stop early on a tiny space; never here
        drawn.append(len(drawn))
    return drawn


def workload(seed: int, n: int, *, prompt: tuple[int, int] = (1, 20),
             max_tokens: tuple[int, int] = (1, 14), shared: int = 0, stop: float = 0.3,
             sampled: float = 0.3) -> list[dict]:
    """n request specs: prompts of `shared` common tokens plus a random tail, random limits,
    some with a stop token, some sampled at temperature 0.7."""
    rng = random.Random(seed)
    system = [rng.randrange(VOCAB_SIZE) for _ in range(shared)]
    out = []
    for i in range(n):
        tail = [rng.randrange(VOCAB_SIZE) for _ in range(rng.randint(*prompt))]
        out.append({"request_id": i, "prompt": system + tail,
                    "max_tokens": rng.randint(*max_tokens),
                    "stop_token": rng.randrange(VOCAB_SIZE) if rng.random() < stop else None,
                    "temperature": 0.7 if rng.random() < sampled else 0.0,
                    "seed": rng.randrange(1000)})
    return out


def radix_ops(seed: int, count: int, alphabet: int = 3) -> list[tuple]:
    """Operations on a RadixCache: insert / match / lock (match + inc_ref) / unlock (dec_ref
    of a held node) / evict, over short sequences of a few distinct tokens (so prefixes are
    shared and edges split often); it ends by releasing every node still held and evicting
    everything, after which the tree must be empty (a reference left behind on the lower part
    of a split shows there)."""
    rng = random.Random(seed)
    ops: list[tuple] = []
    held = 0

    def seq() -> list[int]:
        return [rng.randrange(alphabet) for _ in range(rng.randint(1, 7))]

    for _ in range(count):
        roll = rng.random()
        if roll < 0.35:
            ops.append(("insert", seq()))
        elif roll < 0.55:
            ops.append(("match", seq()))
        elif roll < 0.65:
            ops.append(("lock", seq()))
            held += 1
        elif roll < 0.75 and held:
            ops.append(("unlock", rng.randrange(held)))
            held -= 1
        else:
            ops.append(("evict", rng.randint(1, 6)))
    ops += [("unlock", 0)] * held + [("evict", 1 << 20)]
    return ops


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
