"""Public tests of paged_kv (20 points): run `pytest assignments/paged_kv`.

Your allocator and cache functions run in a separate process (the harness); these tests look
only at what they return. The hidden suite runs the same kinds of checks on many more cases:
hypothesis-generated operation sequences judged against a reference model after every
operation, eviction order, a forged hash collision, 100 requests sharing a prompt, paged
attention edge cases, and a tiny decoder that must generate the same tokens with your paged
cache as with a contiguous one (README §8).
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import case_value, run_cases


def rank_allocator_basics(ctx):
    """Runs in the rank: a few short scenarios, each returning what the allocator reported.

    Each scenario runs in its own error scope (harness.cases): one that raises, a stub
    included, fails only the tests that read it."""
    mod = ctx.impl_module("paged_kv", "allocator")

    def basic():
        alloc = mod.BlockAllocator(8, 4)
        out = {"table": alloc.allocate(0, 6), "free": alloc.num_free_blocks}
        try:  # what allocate returned is judged first, even if a later call raises
            out.update({"slots": alloc.slot_mapping(0),
                        "appended": [alloc.append_slot(0) for _ in range(3)],
                        "table_after": alloc.block_table(0), "len_after": alloc.seq_len(0)})
            alloc.free(0)
            out["free_after"] = alloc.num_free_blocks
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported by the test, after the table
            out["raised"] = f"{type(exc).__name__}: {exc}"
        return out

    def errors():
        alloc = mod.BlockAllocator(8, 4)
        found = {}
        for name, call in (("append unknown", lambda: alloc.append_slot(9)),
                           ("free unknown", lambda: alloc.free(9)),
                           ("block_table unknown", lambda: alloc.block_table(9)),
                           ("fork unknown parent", lambda: alloc.fork(9, 10)),
                           ("negative count", lambda: alloc.allocate(5, -1))):
            found[name] = _error_name(mod, call)
        alloc.allocate(1, 2)
        found["existing id"] = _error_name(mod, lambda: alloc.allocate(1, 2))
        found["fork onto existing"] = _error_name(mod, lambda: alloc.fork(1, 1))
        return found

    def fork():
        alloc = mod.BlockAllocator(8, 4)
        parent = alloc.allocate(0, 6)
        free_before = alloc.num_free_blocks
        alloc.fork(0, 1)
        out = {"parent": parent, "child": alloc.block_table(1), "free_before": free_before,
               "free_after_fork": alloc.num_free_blocks, "copies_after_fork": alloc.pop_copies()}
        out["child_slot"] = alloc.append_slot(1)
        out["child_table"] = alloc.block_table(1)
        out["copies"] = alloc.pop_copies()
        out["parent_slot"] = alloc.append_slot(0)
        out["parent_table"] = alloc.block_table(0)
        out["copies_after_parent"] = alloc.pop_copies()
        alloc.free(0)
        alloc.free(1)
        out["free_at_end"] = alloc.num_free_blocks
        return out

    def exhaust():
        alloc = mod.BlockAllocator(4, 2)
        alloc.allocate(0, 5)
        out = {"error": _error_name(mod, lambda: alloc.allocate(1, 3)),
               "free_after_failure": alloc.num_free_blocks,
               "created_anyway": _error_name(mod, lambda: alloc.block_table(1)) != "KeyError",
               "can_allocate_3": alloc.can_allocate(3)}
        alloc.free(0)
        out["retry"] = alloc.allocate(1, 3)
        return out

    def prefix():
        alloc = mod.PrefixCachingAllocator(16, 4)
        prompt = list(range(100, 110))
        return {"first": alloc.allocate_prompt(0, prompt),
                "second": alloc.allocate_prompt(1, prompt),
                "other": alloc.allocate_prompt(2, [7] + prompt[1:])}

    return run_cases(ctx, [("basic", basic), ("errors", errors), ("fork", fork),
                           ("exhaust", exhaust), ("prefix", prefix)])


def _error_name(mod, call) -> str | None:
    try:
        call()
    except NotImplementedError:
        raise
    except mod.OutOfBlocks:
        return "OutOfBlocks"
    except Exception as exc:  # noqa: BLE001 - the type is what the test checks
        return type(exc).__name__
    return None


@pytest.fixture(scope="module")
def basics(launch):
    outcomes = launch(rank_allocator_basics, world_size=1, timeout=60).values[0]
    return {name: lambda name=name: case_value(outcomes[name], f"the {name!r} scenario")
            for name in outcomes}


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(4)
def test_allocate_append_free(basics):
    got = basics["basic"]()
    table = got["table"]
    assert len(table) == 2 and len(set(table)) == 2, (
        f"allocate(0, 6) with block_size 4 returned {table}; expected "
        f"ceil(num_tokens / block_size) = 2 distinct blocks")
    assert got["free"] == 6, f"num_free_blocks is {got['free']} after taking 2 of 8 blocks"
    assert "raised" not in got, (
        f"after allocate(0, 6), slot_mapping / append_slot / free raised {got.get('raised')}")
    expected_slots = [table[p // 4] * 4 + p % 4 for p in range(6)]
    assert got["slots"] == expected_slots, (
        f"slot_mapping is {got['slots']}, expected {expected_slots} "
        f"(table[p // block_size] * block_size + p % block_size)")
    new_table = got["table_after"]
    expected = [table[1] * 4 + 2, table[1] * 4 + 3, new_table[-1] * 4 + 0]
    assert len(new_table) == 3 and got["appended"] == expected, (
        f"three append_slot calls after 6 tokens returned {got['appended']} with table "
        f"{new_table}; expected {expected}: fill the last block, then take a new one")
    assert got["len_after"] == 9, f"seq_len is {got['len_after']} after 6 + 3 tokens"
    assert got["free_after"] == 8, f"{got['free_after']} of 8 blocks free after free(0)"


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(3)
def test_errors(basics):
    expected = {"append unknown": "KeyError", "free unknown": "KeyError",
                "block_table unknown": "KeyError", "fork unknown parent": "KeyError",
                "negative count": "ValueError", "existing id": "ValueError",
                "fork onto existing": "ValueError"}
    for case, error in expected.items():
        got = basics["errors"]()[case]
        assert got == error, f"{case}: expected {error}, got {got or 'no exception'}"


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(4)
def test_fork_and_copy_on_write(basics):
    got = basics["fork"]()
    parent = got["parent"]
    assert got["child"] == parent, f"the forked child's table {got['child']} != parent's {parent}"
    assert got["free_after_fork"] == got["free_before"] and not got["copies_after_fork"], (
        "fork must allocate nothing and owe no copies")
    child_last = got["child_table"][-1]
    assert got["child_table"][0] == parent[0] and child_last not in parent, (
        f"the child's table after fork and one append is {got['child_table']}, expected "
        f"[{parent[0]}, <a fresh block>]: fork must raise each block's reference count, and "
        f"append_slot copy a shared last block (copy-on-write)")
    assert [tuple(c) for c in got["copies"]] == [(parent[1], child_last)], (
        f"pop_copies returned {got['copies']}, expected [({parent[1]}, {child_last})]")
    assert got["child_slot"] == child_last * 4 + 2, (
        f"the child's slot is {got['child_slot']}, expected {child_last * 4 + 2}")
    assert got["parent_table"] == parent and got["parent_slot"] == parent[1] * 4 + 2, (
        "once the child has its own copy, the parent writes into its own last block in place")
    assert not got["copies_after_parent"], "the parent's append must not copy: no longer shared"
    assert got["free_at_end"] == 8, f"{got['free_at_end']} of 8 blocks free at the end"


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(3)
def test_exhaustion_is_atomic(basics):
    got = basics["exhaust"]()
    assert got["error"] == "OutOfBlocks", (
        f"allocate needing 2 blocks with 1 free raised {got['error'] or 'nothing'}, expected "
        f"OutOfBlocks")
    assert got["free_after_failure"] == 1 and not got["created_anyway"], (
        "a failed allocate must change nothing: no block taken, no sequence created")
    assert got["can_allocate_3"] is False, "can_allocate(3) with one free block of 2 slots"
    assert len(got["retry"]) == 2, "the same request must succeed after a free"


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(3)
def test_prefix_cache_hit(basics):
    got = basics["prefix"]()
    table0, cached0 = got["first"]
    table1, cached1 = got["second"]
    assert cached0 == 0 and len(table0) == 3, (
        f"the first 10-token prompt (block_size 4) returned {got['first']}; expected 3 blocks "
        f"and 0 cached tokens")
    assert cached1 == 8 and table1[:2] == table0[:2] and table1[2] != table0[2], (
        f"the same prompt again returned {got['second']}; expected its 2 full blocks reused "
        f"({table0[:2]}) and 8 cached tokens: only full blocks are cached, the partial tail "
        f"gets a fresh block")
    assert got["other"][1] == 0, (
        "a prompt whose first token differs shares no prefix: 0 cached tokens")


def rank_attention(ctx, q, k, v, block_size, num_blocks, table):
    cache = ctx.impl_module("paged_kv", "cache")
    heads, dim = k.shape[1], k.shape[2]
    k_cache = torch.zeros(num_blocks, block_size, heads, dim)
    v_cache = torch.zeros(num_blocks, block_size, heads, dim)
    slots = torch.tensor([table[p // block_size] * block_size + p % block_size
                          for p in range(k.shape[0])])
    cache.write_kv(k_cache, v_cache, k, v, slots)
    tables = torch.tensor([table + [-1]])
    return cache.paged_attention(q, k_cache, v_cache, tables, torch.tensor([k.shape[0]]))


@pytest.mark.exercises("write_kv", "paged_attention")
@pytest.mark.points(3)
def test_write_kv_and_paged_attention(launch):
    gen = seeded_generator(0)
    q = torch.randn(1, 2, 8, generator=gen)
    k = torch.randn(6, 2, 8, generator=gen)
    v = torch.randn(6, 2, 8, generator=gen)
    out = launch(rank_attention, world_size=1, args=(q, k, v, 4, 5, [3, 1]), timeout=60).values[0]
    scores = torch.einsum("hd,thd->ht", q[0], k) / 8 ** 0.5
    expected = torch.einsum("ht,thd->hd", torch.softmax(scores, -1), v)[None]
    assert_close(out, expected, what="paged_attention",
                 hint="attend only to positions < context_lens (6 here, in blocks [3, 1]); "
                      "slot = block * block_size + offset")
