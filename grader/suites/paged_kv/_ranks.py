"""Rank side of the paged_kv suite: run operation sequences on the allocator under test.

`rank_run_ops(ctx, jobs)` takes a list of jobs `{"config": {...}, "sequences": [ops, ...]}` and
returns, per job, one trace per sequence. A trace has one record per operation:

    error     None, "OutOfBlocks", "KeyError", "ValueError", or "<Type>: <message>"
    ret       what the call returned, as plain data (None after an error)
    free      num_free_blocks after the call
    copies    pop_copies() after the call, as [src, dst] lists
    tables    {seq: block_table(seq)} of every live sequence
    lens      {seq: seq_len(seq)} of every live sequence
    slots_of  the sequence the call touched (when live), slots: its slot_mapping

A trace whose allocator could not be made (the constructor raised) is one record
`{"init_error": <error as above>}`.

A sequence is live after an allocate/fork/allocate_prompt that returned, until a free that
returned. NotImplementedError always propagates, so a stub fails as "not implemented".
"""

from __future__ import annotations


def plain(value):
    """Plain data for the trip back: ints stay ints; anything odd becomes its repr."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        return repr(value)[:80]
    return as_int if as_int == value else repr(value)[:80]


def call_op(alloc, op):
    kind = op[0]
    if kind == "allocate":
        return alloc.allocate(op[1], op[2])
    if kind == "append":
        return alloc.append_slot(op[1])
    if kind == "fork":
        return alloc.fork(op[1], op[2])
    if kind == "free":
        return alloc.free(op[1])
    if kind == "prompt":
        return alloc.allocate_prompt(op[1], list(op[2]))
    if kind == "can":
        return alloc.can_allocate(op[1])
    if kind in ("block_table", "seq_len", "slot_mapping"):
        return getattr(alloc, kind)(op[1])
    raise ValueError(f"unknown op {op!r}")


def error_name(mod, exc: BaseException) -> str:
    if isinstance(exc, mod.OutOfBlocks):
        return "OutOfBlocks"
    for name, cls in (("KeyError", KeyError), ("ValueError", ValueError)):
        if isinstance(exc, cls):
            return name
    return f"{type(exc).__name__}: {exc}"[:200]


def snapshot(alloc, live: list, touched) -> dict:
    rec = {"free": plain(alloc.num_free_blocks),
           "copies": plain(alloc.pop_copies()),
           "tables": {s: plain(alloc.block_table(s)) for s in live},
           "lens": {s: plain(alloc.seq_len(s)) for s in live},
           "slots_of": touched if touched in live else None}
    rec["slots"] = plain(alloc.slot_mapping(touched)) if touched in live else None
    return rec


def run_sequence(mod, config: dict, ops: list) -> list[dict]:
    """Run one op sequence on a fresh allocator of the config's class and sizes."""
    cls = mod.PrefixCachingAllocator if config.get("prefix") else mod.BlockAllocator
    try:
        alloc = cls(config["num_blocks"], config["block_size"])
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - judged in the parent, by type
        return [{"init_error": error_name(mod, exc)}]
    live: list = []
    trace = []
    for op in ops:
        rec: dict = {"error": None, "ret": None}
        try:
            rec["ret"] = plain(call_op(alloc, op))
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - judged in the parent, by type
            rec["error"] = error_name(mod, exc)
        if rec["error"] is None:
            if op[0] in ("allocate", "prompt") and op[1] not in live:
                live.append(op[1])
            elif op[0] == "fork" and op[2] not in live:
                live.append(op[2])
            elif op[0] == "free" and op[1] in live:
                live.remove(op[1])
        touched = op[2] if op[0] == "fork" else None if op[0] == "can" else op[1]
        try:
            rec.update(snapshot(alloc, live, touched))
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing query is a finding for the judge
            rec["snapshot_error"] = f"{type(exc).__name__}: {exc}"[:200]
            trace.append(rec)
            break
        trace.append(rec)
    return trace


def rank_run_ops(ctx, jobs: list[dict]) -> list[dict]:
    """Every job's sequences, each on a fresh allocator of the job's config; per job, in its own
    error scope (harness.cases.capture), the outcome whose value is its list of traces: a stub
    of one class fails only the jobs that use it. The parent unwraps it with `job_traces`."""
    from harness.cases import capture

    mod = ctx.impl_module("paged_kv", "allocator")
    return [capture(lambda job=job: [run_sequence(mod, job["config"], ops)
                                     for ops in job["sequences"]]) for job in jobs]


def job_traces(outcome: dict, config: dict) -> list[list[dict]]:
    """Parent side: the traces of one job's outcome, or what it raised in the rank."""
    from harness.cases import case_value

    cls = "PrefixCachingAllocator" if config.get("prefix") else "BlockAllocator"
    return case_value(outcome, f"{cls} operation sequences ({config['name']!r} config)")
