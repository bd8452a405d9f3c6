"""Judging an engine run's trace (see `_ranks.run_engine_job`) against the documented rules.

`check_run(job, result, expected)` checks, in order, the rules of every plan (token budget,
max_num_seqs, nobody both waiting and running, waiting in arrival order, preemption victims
newest first, blocks released on preemption and conserved, decodes first, admission first
come first served and filling the budget), then that nothing crashed, that every request
finished, that the outputs equal one-request-at-a-time generation, and that every block is
back (or held by the cache) at the end. The first broken rule raises an AssertionError whose
first line names it and the fix; hidden inputs stay out of it.
"""

from __future__ import annotations

from typing import Any


def _fail(message: str) -> None:
    raise AssertionError(message)


def check_plan(job: dict, k: int, plan: dict[str, Any], arrival: dict[int, int]) -> None:  # noqa: C901
    config = job["config"]
    budget, max_seqs = config["max_num_tokens"], config["max_num_seqs"]
    cache_on = config.get("prefix_cache", False)
    overlap = config.get("overlap", False)
    before, state = plan["before"], plan["state"]
    where = f"plan {k}"
    used = sum(n for _, _, n in plan["batch"])
    if used > budget:
        _fail(f"{where}: the token budget is exceeded: {used} tokens planned, "
              f"max_num_tokens={budget}; count every planned token against the budget")
    if len(plan["running"]) > max_seqs:
        _fail(f"{where}: {len(plan['running'])} requests running, max_num_seqs={max_seqs}")
    both = set(plan["waiting"]) & set(plan["running"])
    if both:
        _fail(f"{where}: request(s) {sorted(both)} both waiting and running; a request is in "
              "exactly one list")
    order = [arrival[rid] for rid in plan["waiting"]]
    if order != sorted(order):
        _fail(f"{where}: `waiting` is not in arrival order (first come, first served): a "
              "preempted request goes back to its arrival place")
    preempted = [rid for rid in before["running"]
                 if state[rid]["preemptions"] > before["state"][rid]["preemptions"]]
    if preempted and before["running"][-len(preempted):] != preempted:
        _fail(f"{where}: preempted request(s) {preempted} are not the newest running ones "
              f"(running, oldest first: {before['running']}); preempt the newest admitted "
              "request first")
    planned = [rid for rid, _, _ in plan["batch"]]
    if len(set(planned)) != len(planned):
        _fail(f"{where}: a request appears twice in one plan")
    readmitted = [rid for rid in preempted if rid in plan["running"]]
    if readmitted:
        _fail(f"{where}: request(s) {readmitted} preempted and admitted again in the same "
              "plan: admit nobody in a step that had to preempt")
    newcomers = [rid for rid in before["waiting"] if rid in plan["running"]]
    if preempted and newcomers:
        _fail(f"{where}: admitted {newcomers} in a plan that preempted {preempted}: admit "
              "nobody in a step that had to preempt")
    for rid, start, n in plan["batch"]:
        if rid in before["running"] and start != before["state"][rid]["num_computed"]:
            _fail(f"{where}: request {rid} planned from token {start} but "
                  f"{before['state'][rid]['num_computed']} were computed: a plan goes on "
                  "where the request's num_computed stands")
        if rid not in plan["running"]:
            _fail(f"{where}: request {rid} is planned but not running after schedule() "
                  "(was it preempted after being planned?)")
        if n < 1:
            _fail(f"{where}: request {rid} planned with {n} tokens")
    for rid, now in state.items():
        was = before["state"].get(rid)
        if was is not None and now["num_output"] < was["num_output"]:
            _fail(f"{where}: preemption must keep the generated output (README §3, §8): "
                  f"request {rid} had {was['num_output']} output tokens before schedule() "
                  f"and {now['num_output']} after; recompute from prompt + output")
    for rid in preempted:
        if state[rid]["preemptions"] != before["state"][rid]["preemptions"] + 1:
            _fail(f"{where}: request {rid} was preempted once but num_preemptions went from "
                  f"{before['state'][rid]['preemptions']} to {state[rid]['preemptions']}")
    for rid in plan["waiting"]:
        if rid in state and state[rid]["num_computed"] != 0:
            _fail(f"{where}: request {rid} is waiting with num_computed="
                  f"{state[rid]['num_computed']}: preemption resets it to 0 (recompute)")
        if state.get(rid, {}).get("blocks"):
            _fail(f"{where}: request {rid} is waiting but still holds "
                  f"{state[rid]['blocks']} KV blocks: free a request's blocks when you "
                  "preempt it")
    if not cache_on:
        held = sum(state[rid]["blocks"] for rid in plan["running"])
        if plan["free"] + held != job["num_blocks"]:
            _fail(f"{where}: KV blocks leaked: {plan['free']} free + {held} held by running "
                  f"requests != {job['num_blocks']}; every block must be owned or free")
        for rid in plan["running"]:
            if state[rid]["blocks"] != state[rid]["num_computed"]:
                _fail(f"{where}: request {rid} holds {state[rid]['blocks']} blocks for "
                      f"{state[rid]['num_computed']} computed tokens: one block per token")
    got = {rid: n for rid, _, n in plan["batch"]}
    for rid in before["running"]:
        s = before["state"][rid]
        if rid in got and s["num_computed"] == s["num_tokens"] \
                and s["num_output"] + 1 >= s["max_tokens"]:
            _fail(f"{where}: request {rid} was planned although the token in flight is its "
                  "last (len(output) + 1 == max_tokens): plan nothing for it")
        if s["num_computed"] < s["num_tokens"] - 1 or rid in preempted:
            continue
        last_in_flight = (s["num_computed"] == s["num_tokens"]
                          and s["num_output"] + 1 >= s["max_tokens"])
        if overlap and last_in_flight:
            continue
        if got.get(rid) != 1:
            _fail(f"{where}: request {rid} was decoding but got "
                  f"{got.get(rid, 0)} tokens instead of 1: running requests decode first, "
                  "before any prefill")
    for rid in before["running"]:
        s = before["state"][rid]
        if s["num_computed"] < s["num_tokens"] - 1 and rid not in preempted \
                and rid not in got and used < budget:
            _fail(f"{where}: request {rid} stopped prefilling with "
                  f"{s['num_tokens'] - s['num_computed']} prompt tokens left and budget to "
                  "spare: continue a chunked prefill up to its last chunk")
    admitted = [rid for rid in before["waiting"] if rid in plan["running"]]
    if admitted != before["waiting"][:len(admitted)]:
        _fail(f"{where}: admitted {admitted} while earlier requests kept waiting: admit "
              "waiting requests first come, first served")
    if not cache_on and not preempted and plan["waiting"] \
            and len(plan["running"]) < max_seqs and used < budget:
        first = state.get(plan["waiting"][0])
        need = min(first["num_tokens"], budget - used) if first else 1
        if plan["free"] >= need:
            _fail(f"{where}: only {used} of the token budget of {budget} used while request "
                  f"{plan['waiting'][0]} waited with {plan['free']} blocks free: fill the "
                  "budget, chunking the prompt that does not fit")


def check_run(job: dict, result: dict[str, Any], expected: dict[int, list[int]]) -> None:
    arrival = {spec["request_id"]: i for i, spec in enumerate(job["requests"])}
    for k, plan in enumerate(result["plans"]):
        check_plan(job, k, plan, arrival)
    if result["error"]:
        if job["config"].get("prefix_cache") and "incref of free block" in result["error"]:
            _fail(f"an admission used blocks already freed: inc_ref the matched node (and "
                  f"incref its blocks) before evicting to make room, or the eviction can "
                  f"remove your own cache hit (README §10) — the engine raised "
                  f"{result['error']}")
        _fail(f"the engine raised {result['error']}")
    if job["config"].get("prefix_cache"):
        check_lookups(result)
    unfinished = sorted(rid for rid, s in result["status"].items() if s != "finished")
    if unfinished:
        _fail(f"request(s) {unfinished} never finished in {result['calls']} steps "
              "(starvation?): every request must finish")
    for spec in job["requests"]:
        rid = spec["request_id"]
        got, want = result["outputs"][rid], expected[rid]
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                      min(len(got), len(want)))
            _fail(f"request {rid}: output differs from one-request-at-a-time generation at "
                  f"token {at} (got {len(got)} tokens, expected {len(want)})")
    check_end(job, result)


def check_lookups(result: dict[str, Any]) -> None:
    """The prefix-cache counters (README §3, step 3): every admission adds len(tokens) — the
    prompt and the output kept through a preemption — to lookup_tokens, and its cached length
    (the admitted entry's start) to hit_tokens."""
    lookups = hits = 0
    for plan in result["plans"]:
        for rid, start, _ in plan["batch"]:
            if rid in plan["before"]["waiting"]:
                lookups += plan["before"]["state"][rid]["num_tokens"]
                hits += start
    stats = result["stats"]
    if stats.get("lookup_tokens") != lookups:
        _fail(f"lookup_tokens is {stats.get('lookup_tokens')}, expected {lookups}: each "
              f"admission adds len(tokens) (prompt + output kept, also at a re-admission "
              f"after preemption), not len(prompt) (README §3)")
    if stats.get("hit_tokens") != hits:
        _fail(f"hit_tokens is {stats.get('hit_tokens')}, expected {hits}: each admission "
              f"adds the length of its cached prefix (README §3)")


def check_end(job: dict, result: dict[str, Any]) -> None:
    reported = sorted(result["reported"])
    if reported != sorted(spec["request_id"] for spec in job["requests"]):
        _fail(f"step() reported {len(reported)} finished requests ({len(set(reported))} "
              f"distinct) for {len(job['requests'])} requests: each step returns the "
              "requests that finished in it, each exactly once")
    cached = result["cache_size"] or 0
    held = sum(1 for c in result["refcounts"] if c > 0)
    if result["free"] + cached != job["num_blocks"] or held != cached \
            or any(c > 1 for c in result["refcounts"]):
        _fail(f"KV blocks leaked: after every request finished, {result['free']} blocks are "
              f"free and the cache holds {cached} of {job['num_blocks']}; release a request's "
              "blocks when it finishes or is preempted")
    if result["cache_size"] is not None and result["free_after_evict"] != job["num_blocks"]:
        if result.get("free_after_evicts") == job["num_blocks"]:
            _fail(f"evict(n) must go on removing unreferenced leaves until n blocks went or "
                  f"none is left (a parent left childless included): after every request "
                  f"finished, one evict({job['num_blocks']}) freed only up to "
                  f"{result['free_after_evict']} blocks, and further calls freed the rest")
        _fail(f"after every request finished, cache.evict could free only "
              f"{result['free_after_evict']} of {job['num_blocks']} blocks: a finished or "
              "preempted request still holds a reference on a radix node (dec_ref)")
