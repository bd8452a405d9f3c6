"""The allocator contract's rules as the reference model applies them: the mismatch it raises,
the names of the API's calls, why each call may fail, and the checks of a returned block list.
"""

from __future__ import annotations


class TraceMismatch(AssertionError):
    """The implementation's record of one operation breaks the contract.

    `args[0]` is the first line shown to students: what went wrong, no hidden inputs.
    """


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


QUERIES = ("block_table", "seq_len", "slot_mapping")
_API_NAME = {"allocate": "allocate", "append": "append_slot", "fork": "fork", "free": "free",
             "prompt": "allocate_prompt", "can": "can_allocate",
             **{query: query for query in QUERIES}}
_WHY = {
    ("allocate", "ValueError"): "an existing seq id or a negative token count",
    ("can", "ValueError"): "a negative token count",
    ("append", "KeyError"): "an unknown seq id",
    ("fork", "KeyError"): "an unknown parent id",
    ("fork", "ValueError"): "a child id that already exists",
    ("free", "KeyError"): "an unknown seq id",
    ("prompt", "ValueError"): "an existing seq id or an empty prompt",
    **{(query, "KeyError"): "an unknown seq id" for query in QUERIES},
}


def _error_message(name: str, expected: str | None, got: str | None, op: tuple) -> str:
    if expected is None:
        return f"{name} raised {got} where it should succeed"
    if expected == "OutOfBlocks":
        return (f"{name} should raise OutOfBlocks (too few free blocks for the request) but "
                f"{'succeeded' if got is None else 'raised ' + got}")
    why = _WHY.get((op[0], expected), "invalid arguments")
    return (f"{name} with {why} should raise {expected} but "
            f"{'succeeded' if got is None else 'raised ' + got}")


def _int_list(value: object, what: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TraceMismatch(f"{what} is not a list of int block ids")
    return list(value)


def _check_fresh(chosen: list[int], n: int, uncached: set[int], lru: list[int],
                 what: str) -> None:
    """Fresh blocks must be free; uncached ones first; cached ones least recently used first."""
    if len(set(chosen)) != len(chosen):
        raise TraceMismatch(f"{what} handed out the same block twice")
    for block in chosen:
        if block not in uncached and block not in lru:
            raise TraceMismatch(
                f"{what} handed out a block that is still in use (reference count > 0); "
                f"take only free blocks, and count references on fork")
    cached = [b for b in chosen if b not in uncached]
    if cached and len(chosen) - len(cached) < min(n, len(uncached)):
        raise TraceMismatch(
            f"{what} evicted a cached block while uncached free blocks were left; evict only "
            f"when no uncached free block remains")
    if cached and set(cached) != set(lru[:len(cached)]):
        raise TraceMismatch(
            f"{what} evicted a cached block out of LRU order; evict the block that became free "
            f"the longest time ago first (free releases a table's blocks last block first)")
