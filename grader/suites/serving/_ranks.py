"""What travels to the ranks of the serving hidden suite.

`rank_jobs` runs named *jobs* in one rank, each in its own error scope
(harness.cases.run_cases), so a stubbed RadixCache fails only the jobs that use it:
    engine  build Engine(TinyLM(...), **config), add the requests (some at later steps),
            drive step() to the end while watching every scheduler.schedule() call (the
            scheduler's lists and each request's state before and after it) and the model's
            launch / result events; return the trace, the outputs and the counters
    radix   a sequence of RadixCache operations on a BlockManager; the result of each and
            the block reference counts after it
    sample  sample(logits, request) for given logits and requests
    errors  calls that must raise ValueError
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_CALLS = 200  # step() calls per engine job; the solution needs at most about 75
IDLE_CALLS = 3  # step() calls in a row without a forward before a job is given up
SEED_STRIDE = 4096  # engine.sample's documented seed: request.seed * 4096 + len(output)
# Lines of the code under test one call into it may run (harness.budget.counted), far above any
# correct call's; counted, not timed, so a scheduler loop that never ends (a preemption that
# frees nothing) fails its own job within seconds, idle or loaded, instead of the launch's limit.
MAX_LINES = 2_000_000
LOOP_HINT = ("{fn} ran {lines} lines without returning: a loop that never ends? Each pass of a "
             "loop that makes room must free blocks (preempt, evict) or give up")


def _modules(ctx: Any) -> dict[str, Any]:
    """The code under test, radix and scheduler first so the engine's relative imports find
    these very modules (a mutant of one of them included)."""
    return {name: ctx.impl_module("serving", name) for name in ("radix", "scheduler", "engine")}


def rank_jobs(ctx: Any, jobs: dict[str, dict]) -> dict[str, dict]:
    """Every job of `jobs`, each in its own error scope, each call into the code under test
    within MAX_LINES lines; {name: outcome}."""
    from harness.budget import counted
    from harness.cases import run_cases

    mods = _modules(ctx)
    runners = {"engine": run_engine_job, "radix": run_radix_job, "sample": run_sample_job,
               "errors": run_error_job, "generate": run_generate_job}
    return run_cases(ctx, [(name, lambda job=job: counted(lambda: runners[job["kind"]](mods, job),
                                                          MAX_LINES, LOOP_HINT))
                           for name, job in jobs.items()])


def _request_state(r: Any) -> dict[str, Any]:
    return {"id": r.request_id, "status": r.status.value, "num_computed": r.num_computed,
            "num_tokens": len(r.prompt) + len(r.output), "num_output": len(r.output),
            "max_tokens": r.max_tokens, "blocks": len(r.blocks),
            "preemptions": r.num_preemptions}


def run_engine_job(mods: dict[str, Any], job: dict) -> dict[str, Any]:
    from assignments.serving.model import TinyLM
    from assignments.serving.request import Request

    model = TinyLM(job["num_blocks"], seed=job["model_seed"])
    engine = mods["engine"].Engine(model, **job["config"])
    sched = engine.scheduler
    requests = [Request(**spec) for spec in job["requests"]]
    arrive = job.get("arrive_at") or [0] * len(requests)
    plans: list[dict[str, Any]] = []
    original = sched.schedule

    def watched() -> Any:
        everyone = sched.waiting + sched.running
        before = {"waiting": [r.request_id for r in sched.waiting],
                  "running": [r.request_id for r in sched.running],
                  "state": {r.request_id: _request_state(r) for r in everyone}}
        model.events.append("schedule")
        batch = original()
        after_all = [r for r in requests if r.request_id in before["state"]]
        plans.append({
            "before": before,
            "batch": [[e.request.request_id, e.start, e.num_tokens] for e in batch],
            "waiting": [r.request_id for r in sched.waiting],
            "running": [r.request_id for r in sched.running],
            "state": {r.request_id: _request_state(r) for r in after_all},
            "free": engine.manager.num_free(),
        })
        return batch

    sched.schedule = watched
    added, calls, idle, error = 0, 0, 0, None
    reported: list[int] = []
    limit = job.get("max_calls", MAX_CALLS)
    try:
        while added < len(requests) or engine.has_unfinished():
            while added < len(requests) and arrive[added] <= calls:
                engine.add(requests[added])
                added += 1
            model.events.append("step")
            before = model.forwards
            reported += [r.request_id for r in engine.step()]
            calls += 1
            idle = idle + 1 if model.forwards == before else 0
            if calls > limit or idle > IDLE_CALLS:
                break  # judged as "never finished" after the plans that led here
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - judged after the trace that led to it
        error = f"{type(exc).__name__}: {exc}"
    cache = engine.cache
    cached = cache.size() if cache is not None else None
    free = engine.manager.num_free()
    refcounts = [engine.manager.refcount(b) for b in range(model.num_blocks)]
    repeated = None
    if cache is not None and error is None:
        cache.evict(model.num_blocks)  # every request is done: nothing may stay referenced
        after_one = engine.manager.num_free()
        for _ in range(model.num_blocks):  # evidence for the hint: does evict stop early?
            if not cache.evict(model.num_blocks):
                break
        repeated = engine.manager.num_free()
        free_after_evict = after_one
    else:
        free_after_evict = engine.manager.num_free()
    return {
        "outputs": {r.request_id: list(r.output) for r in requests},
        "status": {r.request_id: r.status.value for r in requests},
        "ttft": {r.request_id: r.ttft() if r.token_steps else None for r in requests},
        "tpot": {r.request_id: r.tpot() for r in requests},
        "token_steps": {r.request_id: list(r.token_steps) for r in requests},
        "arrival_step": {r.request_id: r.arrival_step for r in requests},
        "preemptions": sum(r.num_preemptions for r in requests),
        "error": error, "plans": plans, "events": list(model.events), "calls": calls,
        "computed_tokens": model.computed_tokens, "forwards": model.forwards,
        "stats": engine.stats(), "num_steps": engine.num_steps,
        "free": free, "refcounts": refcounts,
        "cache_size": cached, "reported": reported,
        "free_after_evict": free_after_evict, "free_after_evicts": repeated,
    }


def run_radix_job(mods: dict[str, Any], job: dict) -> list[dict[str, Any]]:
    from assignments.serving.blocks import BlockManager

    manager = BlockManager(job["num_blocks"])
    cache = mods["radix"].RadixCache(manager)
    held: list[Any] = []
    trace = []
    for op in job["ops"]:
        kind = op[0]
        record: dict[str, Any] = {}
        if kind == "insert":
            blocks = manager.allocate(len(op[1]))
            record["blocks"] = blocks
            record["result"] = cache.insert(list(op[1]), blocks)
            manager.free(blocks)  # the caller's own reference, as a finished request drops it
        elif kind == "match":
            record["result"] = list(cache.match_prefix(list(op[1]))[0])
        elif kind == "lock":
            blocks, node = cache.match_prefix(list(op[1]))
            cache.inc_ref(node)
            held.append(node)
            record["result"] = list(blocks)
        elif kind == "unlock":
            cache.dec_ref(held.pop(op[1]))
        elif kind == "evict":
            record["result"] = cache.evict(op[1])
        record["size"] = cache.size()
        record["refcounts"] = [manager.refcount(b) for b in range(job["num_blocks"])]
        trace.append(record)
    return trace


def run_sample_job(mods: dict[str, Any], job: dict) -> list[int]:
    from assignments.serving.request import Request

    out = []
    for logits, spec, num_output in job["calls"]:
        request = Request(**spec)
        request.output = [0] * num_output
        out.append(mods["engine"].sample(logits.clone(), request))
    return out


def run_error_job(mods: dict[str, Any], job: dict) -> list[str]:
    """Each call's outcome: "ok", "ValueError", "RuntimeError" or another exception's name."""
    from assignments.serving.blocks import BlockManager
    from assignments.serving.model import TinyLM
    from assignments.serving.request import Request

    def outcome(fn: Callable[[], Any]) -> str:
        try:
            fn()
        except NotImplementedError:
            raise
        except (ValueError, RuntimeError) as exc:
            return "ValueError" if isinstance(exc, ValueError) else "RuntimeError"
        except Exception as exc:  # noqa: BLE001 - reported as what was raised instead
            return type(exc).__name__
        return "ok"

    def limits(c: tuple) -> None:
        mods["scheduler"].Scheduler(BlockManager(16), max_num_seqs=c[1], max_num_tokens=c[2])

    def engine_limits(c: tuple) -> None:
        mods["engine"].Engine(TinyLM(16), max_num_seqs=c[1], max_num_tokens=c[2])

    def add(c: tuple) -> None:
        sched = mods["scheduler"].Scheduler(BlockManager(c[1]), max_num_seqs=2, max_num_tokens=4)
        for spec in c[2]:
            sched.add(Request(**spec))

    def insert_mismatch(c: tuple) -> None:
        manager = BlockManager(8)
        mods["radix"].RadixCache(manager).insert([1, 2, 3], manager.allocate(2))

    def dec_ref_twice(c: tuple) -> None:
        manager = BlockManager(8)
        cache = mods["radix"].RadixCache(manager)
        blocks = manager.allocate(3)
        cache.insert([1, 2, 3], blocks)
        _, node = cache.match_prefix([1, 2])
        cache.inc_ref(node)
        cache.dec_ref(node)
        cache.dec_ref(node)

    def defaults(c: tuple) -> None:
        engine = mods["engine"].Engine(TinyLM(16))
        got = (engine.scheduler.max_num_seqs, engine.scheduler.max_num_tokens, engine.overlap,
               engine.cache)
        if got != (8, 32, False, None):
            raise AssertionError(f"Engine(model) has (max_num_seqs, max_num_tokens, overlap, "
                                 f"cache) = {got}")
        engine.generate([Request(0, [1, 2, 3], 1)])  # one forward of 3 tokens
        stats = engine.stats()
        if (stats["steps"], stats["scheduled_tokens"], stats["tokens_per_step"]) != (1, 3, 3.0):
            raise AssertionError(f"one forward of 3 tokens: stats() says {stats}")

    calls = {"limits": limits, "engine_limits": engine_limits, "add": add,
             "insert_mismatch": insert_mismatch, "dec_ref_twice": dec_ref_twice,
             "defaults": defaults}
    return [outcome(lambda c=call: calls[c[0]](c)) for call in job["calls"]]


def run_generate_job(mods: dict[str, Any], job: dict) -> dict[int, list[int]]:
    """Engine.generate as a user calls it."""
    from assignments.serving.model import TinyLM
    from assignments.serving.request import Request

    model = TinyLM(job["num_blocks"], seed=job["model_seed"])
    launch = model.launch

    def bounded(batch: Any) -> Any:  # a livelocked engine must not hang the whole launch
        if model.forwards >= MAX_CALLS:
            raise RuntimeError(f"Engine.generate ran more than {MAX_CALLS} forwards without "
                               "finishing (a livelock: requests preempting each other?)")
        return launch(batch)

    model.launch = bounded  # type: ignore[method-assign]  # watched, on purpose
    engine = mods["engine"].Engine(model, **job["config"])
    return engine.generate([Request(**spec) for spec in job["requests"]])
