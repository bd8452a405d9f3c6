"""BlockAllocator on hand-written operation sequences: boundaries, errors, exhaustion, forks,
and the constructor's sizes (< 1 is a ValueError; one block of one slot is a working pool).

Every sequence runs on a fresh allocator in one rank launch; the parent's reference model
(`_model.py`) judges each returned record: the expected error, the invariants (free + used =
total, ceil(len / block_size) blocks per sequence, no write into another sequence's block),
then the exact tables, lengths, copies and slots.
"""

from __future__ import annotations

from grader.suites.paged_kv._cases import Job, job_tests

BOUNDARY = {"name": "boundary", "num_blocks": 8, "block_size": 4}
BOUNDARY_OPS = [
    ("allocate", 0, 0), *[("append", 0)] * 9,          # 0 tokens, then across two boundaries
    ("allocate", 1, 4), ("append", 1),                 # exactly one full block, then one more
    ("allocate", 2, 5), *[("append", 2)] * 4,          # 5 -> 9 tokens
    ("slot_mapping", 2), ("block_table", 1), ("seq_len", 0),
    ("free", 0), ("free", 1), ("free", 2),
]

ERRORS = {"name": "errors", "num_blocks": 6, "block_size": 2}
ERRORS_OPS = [
    ("append", 9), ("free", 9), ("fork", 9, 1), ("block_table", 9), ("seq_len", 9),
    ("slot_mapping", 9), ("allocate", 0, -1), ("can", -1),
    ("allocate", 0, 3), ("allocate", 0, 1), ("fork", 0, 0), ("allocate", 1, 0),
    ("fork", 0, 1), ("free", 1), ("free", 1), ("append", 1), ("free", 0), ("free", 0),
]

EXHAUST = {"name": "exhaustion", "num_blocks": 4, "block_size": 2}
EXHAUST_OPS = [
    ("allocate", 0, 5), ("can", 3), ("allocate", 1, 3),   # 3 of 4 blocks; 2 more do not fit
    ("can", 2), ("allocate", 1, 2),                        # the pool is full now
    ("append", 1),                                         # needs a block: fails, length stays 2
    ("append", 0), ("append", 0),                          # room in the last block, then none
    ("free", 1), ("append", 0), ("allocate", 1, 3),        # the freed block is usable again
    ("free", 0), ("allocate", 1, 3),                       # the same request after a free
    ("fork", 1, 2), ("append", 2),                         # copy-on-write takes the 3rd block
    ("allocate", 3, 2), ("fork", 1, 4), ("append", 4),     # copy-on-write with no free block
    ("append", 1), ("free", 4), ("free", 3), ("free", 2), ("free", 1),
]

FORK = {"name": "fork", "num_blocks": 10, "block_size": 4}
FORK_OPS = [
    ("allocate", 0, 6), ("fork", 0, 1), ("fork", 1, 2),    # three tables, two blocks in use
    ("free", 0),                                           # the children keep both blocks
    ("append", 1), ("append", 2),                          # copy, then write in place
    ("append", 2), ("append", 2), ("append", 2),           # seq 2 crosses into a new block
    ("fork", 2, 3), ("free", 2), ("append", 3),
    ("free", 1), ("free", 3),
]

# The constructor: a size < 1 is a ValueError (nothing to run after it); 1 and 1 is a pool.
NO_BLOCKS = {"name": "no_blocks", "num_blocks": 0, "block_size": 4}
ZERO_SLOTS = {"name": "zero_block_size", "num_blocks": 4, "block_size": 0}
ONE_SLOT = {"name": "one_block_of_one_slot", "num_blocks": 1, "block_size": 1}
ONE_SLOT_OPS = [
    ("allocate", 0, 1), ("append", 0), ("can", 1),      # the only slot is taken: no room
    ("free", 0), ("can", 1), ("allocate", 1, 0), ("append", 1), ("free", 1),
]

JOBS: dict[str, Job] = {"boundary": (BOUNDARY, [BOUNDARY_OPS]), "errors": (ERRORS, [ERRORS_OPS]),
        "exhaustion": (EXHAUST, [EXHAUST_OPS]), "fork": (FORK, [FORK_OPS]),
        "no_blocks": (NO_BLOCKS, [[]]), "zero_block_size": (ZERO_SLOTS, [[]]),
        "one_block_of_one_slot": (ONE_SLOT, [ONE_SLOT_OPS])}


ALLOCATOR = job_tests(JOBS)
case_runs = ALLOCATOR.fixture

test_new_block_exactly_when_the_last_is_full = ALLOCATOR.test(3, "boundary")
test_errors_for_unknown_and_existing_ids_and_negative_counts = ALLOCATOR.test(2, "errors")
test_exhaustion_is_atomic_and_recovers_after_free = ALLOCATOR.test(3, "exhaustion")
test_fork_shares_blocks_and_free_keeps_what_others_hold = ALLOCATOR.test(3, "fork")
test_sizes_below_one_are_rejected_and_one_block_of_one_slot_works = ALLOCATOR.test(
    1, "no_blocks", "zero_block_size", "one_block_of_one_slot")
