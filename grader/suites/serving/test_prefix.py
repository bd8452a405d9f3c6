"""The prefix cache in the engine: hit rate on a shared-system-prompt workload equals the
reference, and the prefill tokens the provided model computed drop by the cached amount."""

from __future__ import annotations

import pytest

from grader.suites.serving._cases import JOBS, expected, jobs_result, value
from grader.suites.serving._ref_checks import check_run

pytestmark = pytest.mark.exercises("Engine")


@pytest.fixture(scope="module")
def results(launch, impl):
    return jobs_result(launch, impl)


def expected_hits(requests: list[dict], outputs: dict[int, list[int]]) -> list[int]:
    """One request at a time (max_num_seqs=1) and no eviction: request i's hit is its longest
    common prefix (capped at len(prompt) - 1) with the cached tokens of the requests before
    it, each cached as prompt + output[:-1] when it finished."""
    cached: list[list[int]] = []
    hits = []
    for r in requests:
        probe = r["prompt"][:-1]
        best = 0
        for seq in cached:
            n = 0
            while n < min(len(seq), len(probe)) and seq[n] == probe[n]:
                n += 1
            best = max(best, n)
        hits.append(best)
        cached.append(r["prompt"] + outputs[r["request_id"]][:-1])
    return hits


@pytest.mark.points(4)
def test_hit_rate_on_shared_system_prompt(results):
    for name in ("prefix_serial", "prefix_chat"):
        check_hits(results, name)


def check_hits(results: dict, name: str) -> None:
    result = value(results, name, f"the engine run ({name}, one request at a time)")
    check_run(JOBS[name], result, expected(name))
    requests = JOBS[name]["requests"]
    hits = sum(expected_hits(requests, expected(name)))
    lookups = sum(len(r["prompt"]) for r in requests)
    stats = result["stats"]
    if (stats["hit_tokens"], stats["lookup_tokens"]) != (hits, lookups):
        raise AssertionError(
            f"prefix hits {stats['hit_tokens']} of {stats['lookup_tokens']} looked-up tokens, "
            f"expected {hits} of {lookups}: at admission match tokens[:-1] in the cache; "
            "insert prompt + output[:-1] when a request finishes")
    if abs(stats["hit_rate"] - hits / lookups) > 1e-12:
        raise AssertionError(f"hit_rate {stats['hit_rate']} != hit_tokens / lookup_tokens")
    computed = result["computed_tokens"]
    plain = sum(len(r["prompt"]) + len(expected(name)[r["request_id"]]) - 1 for r in requests)
    if computed != plain - hits:
        raise AssertionError(
            f"the model computed {computed} tokens, expected {plain - hits} ({plain} without "
            f"the cache minus {hits} cached): start each prefill after the cached prefix")


@pytest.mark.points(4)
def test_computed_prefill_drops_by_the_cached_amount(results):
    on = value(results, "prefix_on", "the engine run (prefix cache on)")
    off = value(results, "prefix_off", "the engine run (prefix cache off)")
    for name, result in (("prefix_on", on), ("prefix_off", off)):
        check_run(JOBS[name], result, expected(name))
    hits = on["stats"]["hit_tokens"]
    if hits == 0:
        raise AssertionError("no prefix hit on a workload sharing a 12-token system prompt "
                             "across 8 requests: match the cache when you admit a request")
    for name, result in (("prefix_on", on), ("prefix_off", off)):
        stats = result["stats"]
        if (stats["steps"], stats["scheduled_tokens"]) != (result["forwards"],
                                                           result["computed_tokens"]) \
                or abs(stats["tokens_per_step"] - stats["scheduled_tokens"]
                       / max(stats["steps"], 1)) > 1e-9:
            raise AssertionError(
                f"Engine.stats() ({name}): steps {stats['steps']}, scheduled_tokens "
                f"{stats['scheduled_tokens']}, tokens_per_step {stats['tokens_per_step']}; "
                f"the model ran {result['forwards']} forwards over "
                f"{result['computed_tokens']} tokens")
    if on["computed_tokens"] + hits != off["computed_tokens"]:
        raise AssertionError(
            f"with the cache the model computed {on['computed_tokens']} tokens and "
            f"{hits} were cache hits; without it {off['computed_tokens']}: the computed "
            "prefill must drop by exactly the cached tokens")
