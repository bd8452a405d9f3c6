"""RadixCache: random operation sequences (hypothesis) judged against a model of the
documented tree, LRU eviction order, and referenced nodes that must survive eviction."""

from __future__ import annotations

import pytest

from grader.suites.serving._cases import JOBS, jobs_result, value
from grader.suites.serving._ref import RadixModel

pytestmark = pytest.mark.exercises("RadixCache")


@pytest.fixture(scope="module")
def results(launch, impl):
    return jobs_result(launch, impl)


def judge(name: str, outcomes: dict) -> None:
    job = JOBS[name]
    trace = value(outcomes, name, f"RadixCache operations ({name})")
    model = RadixModel(job["num_blocks"])
    for k, (op, got) in enumerate(zip(job["ops"], trace, strict=True)):
        kind = op[0]
        where = f"operation {k} ({kind})"
        before = list(model.refcounts)
        if kind == "insert":
            want = model.insert(op[1], got["blocks"])
            if got["result"] != want:
                raise AssertionError(
                    f"{where}: insert returned {got['result']}, expected {want} (the length "
                    "of the prefix already cached; is a node split where the walk stops "
                    "inside an edge?)")
        elif kind in ("match", "lock"):
            want = model.match(op[1]) if kind == "match" else model.lock(op[1])
            if got["result"] != want:
                raise AssertionError(
                    f"{where}: match_prefix returned {len(got['result'])} blocks, expected "
                    f"{len(want)} (or other blocks): split a node exactly where a match "
                    "stops inside its edge, and return the blocks of the whole path")
        elif kind == "unlock":
            model.unlock(op[1])
        elif kind == "evict":
            locked_blocks = {b for key, node in model.nodes.items() if model.locked(key)
                             for b in node["blocks"]}
            want, _ = model.evict(op[1])
            freed = {b for b, (old, new) in enumerate(zip(before, got["refcounts"]))
                     if old > new}
            if freed & locked_blocks:
                raise AssertionError(
                    f"{where}: evict removed blocks of a referenced node: a node with a "
                    "reference count above 0 (inc_ref) is in use and is never evicted")
            released = not any(model.locked(key) for key in model.nodes)
            if released and not model.size() and got["size"]:
                raise AssertionError(
                    f"{where}: a split must leave the holder's reference on the lower part "
                    f"(the node it matched) — with every reference released, evict(everything) "
                    f"left {got['size']} blocks in the tree (README §4)")
            if isinstance(got["result"], int) and got["result"] < min(op[1], want):
                raise AssertionError(
                    f"{where}: evict(n) must go on removing unreferenced leaves until n blocks "
                    f"went or none is left: evict({op[1]}) returned {got['result']}, expected "
                    f"{want}")
            if got["refcounts"] != model.refcounts or got["result"] != want:
                raise AssertionError(
                    f"{where}: evict removed the wrong leaves (returned {got['result']}, "
                    f"expected {want}): evict the least recently used unreferenced leaf "
                    "first; every match_prefix and insert stamps the nodes on its path")
        if got["refcounts"] != model.refcounts:
            raise AssertionError(
                f"{where}: block reference counts differ from the documented ones: the tree "
                "increfs the blocks it stores (only those it did not have) and frees a block "
                "when it evicts its node")
        if got["size"] != model.size():
            raise AssertionError(f"{where}: size() returned {got['size']}, expected "
                                 f"{model.size()} (blocks held by the tree)")


@pytest.mark.points(3)
def test_lru_eviction_order_counts_match_prefix_as_use(results):
    judge("radix_lru", results)


@pytest.mark.points(3)
def test_referenced_nodes_are_never_evicted(results):
    judge("radix_locked", results)
    judge("radix_split_held", results)


@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["radix0", "radix1", "radix2", "radix3"],
                         ids=[f"sequence={i}" for i in range(4)])
def test_random_operation_sequences(results, name):
    judge(name, results)
