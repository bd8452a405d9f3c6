"""Parent-side reference model of the allocator contract (its rules and error texts are in
`_ref_rules`; judging a job's traces with it is `_cases.judge_all`).

The model never imports code under test. It keeps block tables, reference counts, the free
blocks split into *uncached* (a set: any of them may be handed out) and *evictable* (cached
free blocks, least recently released first), and the prefix cache keyed by the exact prefix
(the tuple of every token up to the end of the block) instead of a hash, so it is immune to
collisions by construction.

Block ids are the implementation's choice, so the model runs in one of two modes:
- `Model.step(op)`: the model picks blocks itself (used to turn raw hypothesis draws into
  concrete operation sequences, and by tests that only need counts);
- `Model.judge(op, record)`: the model adopts the blocks the implementation chose, after
  checking that the choice was allowed (a free block; uncached before cached; the least
  recently used cached block when evicting), then compares everything else exactly.

An operation is a tuple of plain data:
    ("allocate", seq, n) ("append", seq) ("fork", parent, child) ("free", seq)
    ("prompt", seq, [token, ...]) ("can", n)
    ("block_table", seq) ("seq_len", seq) ("slot_mapping", seq)
A record is what `_ranks.run_ops` returns per operation (see there).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from grader.suites.paged_kv._ref_rules import (
    _API_NAME,
    QUERIES,
    TraceMismatch,
    _check_fresh,
    _error_message,
    _int_list,
    ceil_div,
)


@dataclass
class Model:
    num_blocks: int
    block_size: int
    prefix: bool = False
    tables: dict[int, list[int]] = field(default_factory=dict)
    lens: dict[int, int] = field(default_factory=dict)
    ref: dict[int, int] = field(default_factory=dict)
    uncached: set[int] = field(default_factory=set)
    evictable: OrderedDict[int, None] = field(default_factory=OrderedDict)
    entry: dict[tuple[int, ...], int] = field(default_factory=dict)  # prefix -> block
    key_of: dict[int, tuple[int, ...]] = field(default_factory=dict)  # cached block -> prefix
    freed_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.uncached = set(range(self.num_blocks))
        self._copies: list[tuple[int, int]] = []  # copies the last operation owes

    # -- queries -------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.uncached) + len(self.evictable)

    def blocks_for(self, num_tokens: int) -> int:
        return ceil_div(num_tokens, self.block_size)

    def slots(self, seq: int) -> list[int]:
        table, bs = self.tables[seq], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(self.lens[seq])]

    def prompt_plan(self, tokens: list[int]) -> tuple[list[int], int]:
        """(hit blocks, fresh blocks needed) for a prompt, without changing anything."""
        bs = self.block_size
        hits = []
        for i in range((len(tokens) - 1) // bs):
            block = self.entry.get(tuple(tokens[:(i + 1) * bs]))
            if block is None:
                break
            hits.append(block)
        return hits, self.blocks_for(len(tokens)) - len(hits)

    def needs_block(self, seq: int) -> bool:
        """Whether append_slot(seq) needs a fresh block (new block or copy-on-write)."""
        offset = self.lens[seq] % self.block_size
        return offset == 0 or self.ref[self.tables[seq][-1]] > 1

    def expected_error(self, op: tuple) -> str | None:
        kind = op[0]
        if kind == "allocate":
            _, seq, n = op
            if seq in self.tables or n < 0:
                return "ValueError"
            return "OutOfBlocks" if self.blocks_for(n) > self.num_free else None
        if kind == "append":
            if op[1] not in self.tables:
                return "KeyError"
            return "OutOfBlocks" if self.needs_block(op[1]) and self.num_free == 0 else None
        if kind == "fork":
            if op[1] not in self.tables:
                return "KeyError"
            return "ValueError" if op[2] in self.tables else None
        if kind == "free":
            return None if op[1] in self.tables else "KeyError"
        if kind == "prompt":
            _, seq, tokens = op
            if seq in self.tables or not tokens:
                return "ValueError"
            hits, needed = self.prompt_plan(tokens)
            revived = sum(1 for b in hits if b not in self.ref)
            return "OutOfBlocks" if needed > self.num_free - revived else None
        if kind == "can":
            return "ValueError" if op[1] < 0 else None
        if kind in QUERIES:
            return None if op[1] in self.tables else "KeyError"
        raise ValueError(f"unknown op {op!r}")

    # -- the pool --------------------------------------------------------------------------------
    def _take(self, n: int, chosen: list[int] | None, what: str) -> list[int]:
        """Take n fresh blocks: the model's own pick, or `chosen` after checking it is allowed."""
        order = list(self.evictable)
        if chosen is None:
            chosen = sorted(self.uncached)[:n]
            chosen += order[:n - len(chosen)]
        else:
            _check_fresh(chosen, n, self.uncached, order, what)
        for block in chosen:
            if block in self.uncached:
                self.uncached.remove(block)
            else:  # evicted: the cache forgets it
                del self.evictable[block]
                del self.entry[self.key_of.pop(block)]
            self.ref[block] = 1
        return list(chosen)

    def _release(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            del self.ref[block]
            if block in self.key_of:
                self.evictable[block] = None
            else:
                self.uncached.add(block)

    # -- operations ------------------------------------------------------------------------------
    def step(self, op: tuple) -> object:
        """Apply `op` with the model's own block choices; return what the API returns."""
        return self._apply(op, None)

    def _apply(self, op: tuple, rec: dict | None) -> object:  # noqa: C901
        """Apply a successful op. With `rec`, adopt and check the implementation's choices."""
        error = self.expected_error(op)
        if error is not None:
            return error
        kind, bs = op[0], self.block_size
        if kind == "allocate":
            _, seq, n = op
            observed = None if rec is None else _int_list(rec["ret"], "allocate's return")
            if observed is not None and len(observed) != self.blocks_for(n):
                raise TraceMismatch(
                    f"allocate of {n} tokens returned {len(observed)} blocks, expected "
                    f"ceil({n} / block_size={bs}) = {self.blocks_for(n)}")
            self.tables[seq] = self._take(self.blocks_for(n), observed, "allocate")
            self.lens[seq] = n
            return list(self.tables[seq])
        if kind == "append":
            seq = op[1]
            table, n = self.tables[seq], self.lens[seq]
            observed = None
            if rec is not None:
                slot = rec["ret"]
                if not isinstance(slot, int) or isinstance(slot, bool):
                    raise TraceMismatch(f"append_slot returned {type(slot).__name__}, "
                                        f"expected an int slot")
                observed = [slot // bs]
                if slot % bs != n % bs:
                    raise TraceMismatch(
                        f"append_slot for position {n} returned a slot at offset {slot % bs} "
                        f"of its block, expected offset {n % bs} (= position % block_size)")
            copies = []
            if observed is not None and table and observed[0] == table[-1] and (
                    n % bs == 0 or self.ref[table[-1]] > 1):
                raise TraceMismatch(
                    "append_slot wrote into a shared, partly filled last block; give the "
                    "sequence a fresh copy first (copy-on-write)" if n % bs else
                    "append_slot wrote into a full last block; take a new block")
            if n % bs == 0:
                table.append(self._take(1, observed, "append_slot (new block)")[0])
            elif self.ref[table[-1]] > 1:
                src = table[-1]
                table[-1] = self._take(1, observed, "append_slot (copy-on-write)")[0]
                self._release(src)
                copies.append((src, table[-1]))
            elif observed is not None and observed[0] != table[-1]:
                raise TraceMismatch(
                    "append_slot moved a sequence to another block although its last block "
                    "had room and was not shared; write into the last block")
            self.lens[seq] = n + 1
            self._copies = copies
            return table[-1] * bs + n % bs
        if kind == "fork":
            _, parent, child = op
            self.tables[child] = list(self.tables[parent])
            self.lens[child] = self.lens[parent]
            for block in self.tables[child]:
                self.ref[block] += 1
            return None
        if kind == "free":
            seq = op[1]
            table = self.tables.pop(seq)
            del self.lens[seq]
            for block in reversed(table):
                self._release(block)
            self.freed_ids.append(seq)
            return None
        if kind == "prompt":
            return self._prompt(op, rec)
        if kind == "can":
            return self.blocks_for(op[1]) <= self.num_free
        if kind == "block_table":
            return list(self.tables[op[1]])
        if kind == "seq_len":
            return self.lens[op[1]]
        if kind == "slot_mapping":
            return self.slots(op[1])
        raise ValueError(f"unknown op {op!r}")

    def _prompt(self, op: tuple, rec: dict | None) -> object:
        _, seq, tokens = op
        bs = self.block_size
        hits, needed = self.prompt_plan(tokens)
        fresh = None
        if rec is not None:
            ret = rec["ret"]
            if not (isinstance(ret, (list, tuple)) and len(ret) == 2):
                raise TraceMismatch("allocate_prompt must return (block_table, num_cached_tokens)")
            table = _int_list(ret[0], "allocate_prompt's block table")
            cached = ret[1]
            if cached != len(hits) * bs:
                capped = len(hits) == (len(tokens) - 1) // bs and cached > len(hits) * bs
                raise TraceMismatch(
                    f"allocate_prompt reported {cached} cached tokens, expected "
                    f"{len(hits) * bs}: "
                    + ("leave at least one prompt token to compute (at most (len - 1) // "
                       "block_size blocks hit)" if capped else
                       f"{len(hits)} leading full blocks whose whole prefix is cached, at most "
                       f"(len - 1) // block_size"))
            if len(table) != self.blocks_for(len(tokens)):
                raise TraceMismatch(
                    f"allocate_prompt of {len(tokens)} tokens returned {len(table)} blocks, "
                    f"expected ceil(len / block_size) = {self.blocks_for(len(tokens))}")
            if table[:len(hits)] != hits:
                raise TraceMismatch(
                    "allocate_prompt's cached blocks are not the blocks that hold that prefix; "
                    "a hit needs the same whole prefix: chain the hash, "
                    "hash_block(previous block's hash, block tokens)")
            fresh = table[len(hits):]
        for block in hits:
            if block in self.evictable:
                del self.evictable[block]
                self.ref[block] = 1
            else:
                self.ref[block] += 1
        table = hits + self._take(needed, fresh, "allocate_prompt")
        for i in range(len(hits), len(tokens) // bs):
            key = tuple(tokens[:(i + 1) * bs])
            if key not in self.entry:
                self.entry[key] = table[i]
                self.key_of[table[i]] = key
        self.tables[seq] = table
        self.lens[seq] = len(tokens)
        return (list(table), len(hits) * bs)

    # -- judging ---------------------------------------------------------------------------------
    def judge(self, op: tuple, rec: dict) -> None:
        """Check one record against the contract, then advance the model. Raises TraceMismatch."""
        name = _API_NAME[op[0]]
        if rec.get("snapshot_error"):
            raise TraceMismatch(f"querying the allocator after {name} raised "
                                f"{rec['snapshot_error'].splitlines()[0]}")
        expected = self.expected_error(op)
        got = rec["error"]
        if got != expected:
            raise TraceMismatch(_error_message(name, expected, got, op))
        self._copies = []
        if expected is None:
            ret = self._apply(op, rec)
            if op[0] in ("fork", "free") and rec["ret"] is not None:
                raise TraceMismatch(f"{name} returned {rec['ret']!r}, expected None")
            if op[0] == "can" and rec["ret"] is not ret:
                raise TraceMismatch(f"can_allocate returned {rec['ret']!r}, expected {ret}")
            if op[0] in QUERIES and rec["ret"] != ret:
                raise TraceMismatch(f"{name} returned {rec['ret']!r}, expected {ret!r}")
        self._check_invariants(op, rec, name)
        self._check_against_model(op, rec, name, failed=expected is not None)

    def _check_invariants(self, op: tuple, rec: dict, name: str) -> None:
        """The contract's invariants, read from the record alone."""
        tables, lens, bs = rec["tables"], rec["lens"], self.block_size
        in_use = {b for table in tables.values() for b in table}
        if rec["free"] + len(in_use) != self.num_blocks:
            twice = rec["free"] + len(in_use) > self.num_blocks
            raise TraceMismatch(  # (the fix's text stays in the raise: reports keep it)
                f"after {name}: num_free_blocks ({rec['free']}) + blocks in live tables "
                f"({len(in_use)}) != num_blocks ({self.num_blocks}); "
                + ("a block leaked" if not twice else
                   "a block is counted both free and in use: a cached free block reused by a "
                   "hit is no longer free" if op[0] == "prompt" else
                   "a block is counted both free and in use"))
        for seq, table in tables.items():
            if any(not 0 <= b < self.num_blocks for b in table):
                raise TraceMismatch(f"after {name}: a block table holds an id outside "
                                    f"0..num_blocks-1")
            if len(table) != self.blocks_for(lens[seq]):
                raise TraceMismatch(
                    f"after {name}: a sequence of {lens[seq]} tokens holds {len(table)} "
                    f"blocks, expected ceil(len / block_size={bs}) = "
                    f"{self.blocks_for(lens[seq])}; take a block only when the last is full")
        if op[0] == "append" and rec["error"] is None:
            block = rec["ret"] // bs
            for other, table in tables.items():
                if other != op[1] and block in table:
                    raise TraceMismatch(
                        "append_slot returned a slot in a block that another live sequence "
                        "holds; its write would corrupt that sequence (copy-on-write missing?)")

    def _check_against_model(self, op: tuple, rec: dict, name: str, failed: bool) -> None:
        how = "after a failed " if failed else "after "
        if rec["free"] != self.num_free:
            raise TraceMismatch(f"{how}{name}: num_free_blocks is {rec['free']}, expected "
                                f"{self.num_free}")
        if set(rec["tables"]) != set(self.tables):
            raise TraceMismatch(f"{how}{name}: the live sequences differ from the expected ones")
        for seq, table in self.tables.items():
            if rec["tables"][seq] != table:
                raise TraceMismatch(
                    f"{how}{name}: a block table differs from the expected one"
                    + ("; a failed call must change nothing" if failed else
                       "; did fork share the table, or copy-on-write replace the last block?"))
            if rec["lens"][seq] != self.lens[seq]:
                raise TraceMismatch(f"{how}{name}: seq_len is {rec['lens'][seq]}, expected "
                                    f"{self.lens[seq]}")
        copies = [tuple(c) for c in rec["copies"]]
        if copies != self._copies:
            if self._copies and not copies:
                raise TraceMismatch(f"after {name}: no copy-on-write copy was recorded, but the "
                                    f"sequence's last block was shared and partly filled")
            raise TraceMismatch(f"after {name}: pop_copies returned {copies}, expected "
                                f"{self._copies}")
        seq = rec.get("slots_of")
        if seq is not None and rec["slots"] != self.slots(seq):
            raise TraceMismatch(f"after {name}: slot_mapping differs from the block table "
                                f"(slot = table[p // block_size] * block_size + p % block_size)")
