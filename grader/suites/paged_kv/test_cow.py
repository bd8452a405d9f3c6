"""Copy-on-write on real tensors: a fork's writes never show in the sequences it shares with.

The rank drives a BlockAllocator and a KV cache through a script of appends, forks and frees.
Every appended token writes a tag (a number unique to the sequence and position) as its key,
and minus the tag as its value, with `write_kv` after applying `pop_copies` with
`copy_blocks`. At the end every live sequence reads its keys and values back through its
slot mapping; the parent expects, per sequence, the tags of its own history: what it
inherited at each fork followed by what it wrote itself.
"""

from __future__ import annotations

import pytest
import torch

HEADS, DIM = 2, 3

CHILD_PRIVATE = {"num_blocks": 12, "block_size": 4, "script": [
    ("new", 0), *[("append", 0)] * 6,
    ("fork", 0, 1), ("append", 1), ("append", 0),   # both write into the shared half block
    *[("append", 1)] * 3, *[("append", 0)] * 3,
]}

THREE_WAY = {"num_blocks": 16, "block_size": 2, "script": [
    ("new", 0), *[("append", 0)] * 3,
    ("fork", 0, 1), ("fork", 0, 2),
    ("append", 2), ("append", 1), ("append", 0), ("append", 2), ("append", 2), ("append", 1),
    ("fork", 2, 3), ("append", 3), ("append", 2), ("free", 0),
    ("append", 1), ("append", 3), ("fork", 3, 4), ("free", 3), ("append", 4), ("append", 1),
]}

SCRIPTS: dict[str, dict] = {"child_private": CHILD_PRIVATE, "three_way": THREE_WAY}


def tag(seq: int, position: int) -> float:
    return 1000.0 * (seq + 1) + position


def rank_cow(ctx, scripts):
    allocator = ctx.impl_module("paged_kv", "allocator")
    cache = ctx.impl_module("paged_kv", "cache")
    out = {}
    for name, spec in scripts.items():
        alloc = allocator.BlockAllocator(spec["num_blocks"], spec["block_size"])
        shape = (spec["num_blocks"], spec["block_size"], HEADS, DIM)
        k_cache, v_cache = torch.zeros(shape), torch.zeros(shape)
        for event in spec["script"]:
            if event[0] == "new":
                alloc.allocate(event[1], 0)
            elif event[0] == "fork":
                alloc.fork(event[1], event[2])
            elif event[0] == "free":
                alloc.free(event[1])
            else:
                seq = event[1]
                position = alloc.seq_len(seq)
                slot = alloc.append_slot(seq)
                copies = alloc.pop_copies()
                if copies:
                    cache.copy_blocks(k_cache, v_cache, copies)
                k = torch.full((1, HEADS, DIM), tag(seq, position))
                cache.write_kv(k_cache, v_cache, k, -k, torch.tensor([slot]))
        created = {e[1] for e in spec["script"] if e[0] == "new"} | {
            e[2] for e in spec["script"] if e[0] == "fork"}
        live = sorted(created - {e[1] for e in spec["script"] if e[0] == "free"})
        out[name] = {}
        for seq in live:
            slots = torch.tensor(alloc.slot_mapping(seq), dtype=torch.long)
            out[name][seq] = {"k": k_cache.view(-1, HEADS, DIM)[slots][:, 0, 0],
                              "v": v_cache.view(-1, HEADS, DIM)[slots][:, 0, 0]}
    return out


def expected_tags(script: list[tuple]) -> dict[int, list[float]]:
    """Each live sequence's tags: inherited at forks, then its own writes."""
    history: dict[int, list[float]] = {}
    for event in script:
        if event[0] == "new":
            history[event[1]] = []
        elif event[0] == "fork":
            history[event[2]] = list(history[event[1]])
        elif event[0] == "free":
            del history[event[1]]
        else:
            history[event[1]].append(tag(event[1], len(history[event[1]])))
    return history


@pytest.fixture(scope="module")
def results(launch):
    return launch(rank_cow, world_size=1, args=(SCRIPTS,), timeout=60).values[0]


def _check(results, name: str) -> None:
    for seq, tags in expected_tags(SCRIPTS[name]["script"]).items():
        got = results[name][seq]
        expected = torch.tensor(tags)
        for what, values, sign in (("key", got["k"], 1.0), ("value", got["v"], -1.0)):
            if values.shape != expected.shape or not torch.equal(values, sign * expected):
                bad = next((p for p in range(min(len(values), len(expected)))
                            if values[p] != sign * expected[p]), None)
                owner = None if bad is None else int(abs(float(values[bad])) // 1000) - 1
                raise AssertionError(
                    f"after forks, a sequence reads a {what} that is not its own "
                    f"({name} script: sequence {seq}, position {bad}, written by sequence "
                    f"{owner}); copy the shared block before writing (copy-on-write), apply "
                    f"pop_copies with copy_blocks before write_kv, and copy both caches")


@pytest.mark.exercises("BlockAllocator", "write_kv", "copy_blocks")
@pytest.mark.points(4)
def test_child_writes_never_show_in_the_parent(results):
    _check(results, "child_private")


@pytest.mark.exercises("BlockAllocator", "write_kv", "copy_blocks")
@pytest.mark.points(4)
def test_three_way_fork_with_frees_keeps_every_history(results):
    _check(results, "three_way")
