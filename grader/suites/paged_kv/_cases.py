"""The cases of the paged_kv suite's allocator tests: operation sequences drawn with hypothesis,
named jobs run in one launch, and their judging by the reference model.

Hypothesis draws *raw* operations (a kind and a few small integers); `concretize` turns them
into a valid-looking sequence by running the reference model alongside: ids mostly name live
sequences, one draw in ten is deliberately invalid (unknown id, existing id, negative count,
empty prompt), and every sequence ends by freeing whatever is still live. Invalid operations
have exactly one thing wrong, so the expected error is never ambiguous.

Draws are deterministic (`@seed`, no example database), so a run is reproducible and
selfcheck is stable. Hypothesis only generates here; the examples are batched into one launch
and judged afterwards, so there is no shrinking.

A *job* is a config (`{"name", "num_blocks", "block_size"[, "prefix"]}`) and the operation
sequences to run on fresh allocators of it (see `_ranks.py` for the operations and what a
trace records). `run_jobs` sends every job of a test module to one rank in one launch; each job
keeps its own error scope there, so a stubbed PrefixCachingAllocator fails only its own jobs.
`JobRuns.judge(name)` judges one job's traces with `judge_all`. `job_tests` makes a
module's launch fixture and its graded tests with the harness's `CaseTests`, one line per test
("job `name` is worth `points`").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from grader.seeds import seeded_generator
from grader.suites.paged_kv._ranks import job_traces, rank_run_ops
from grader.suites.paged_kv._ref import Model
from grader.suites.paged_kv._ref_rules import TraceMismatch
from harness.case_tests import CaseTests


def _judge_constructor(config: dict, trace: list[dict]) -> None:
    """The constructor raises ValueError exactly when num_blocks or block_size is < 1."""
    cls = "PrefixCachingAllocator" if config.get("prefix") else "BlockAllocator"
    invalid = config["num_blocks"] < 1 or config["block_size"] < 1
    got = trace[0].get("init_error") if trace else None
    if invalid and got != "ValueError":
        raise TraceMismatch(
            f"{cls}(num_blocks, block_size) with a size < 1 should raise ValueError but "
            + ("succeeded" if got is None else f"raised {got}")
            + f"\n  (config {config['name']}: num_blocks={config['num_blocks']}, "
              f"block_size={config['block_size']})")
    if not invalid and got is not None:
        raise TraceMismatch(
            f"{cls}(num_blocks, block_size) raised {got} for sizes >= 1; only a size < 1 is "
            f"invalid (one block of one slot is a valid pool)"
            + f"\n  (config {config['name']}: num_blocks={config['num_blocks']}, "
              f"block_size={config['block_size']})")


def judge_trace(config: dict, ops: list[tuple], trace: list[dict]) -> None:
    """Judge one whole trace; raise TraceMismatch whose first line names the failing check."""
    _judge_constructor(config, trace)
    if trace and "init_error" in trace[0]:
        return  # the sizes are invalid and the constructor rejected them: nothing more ran
    model = Model(config["num_blocks"], config["block_size"], config.get("prefix", False))
    for index, (op, rec) in enumerate(zip(ops, trace)):
        try:
            model.judge(op, rec)
        except TraceMismatch as exc:
            start = max(0, index - 6)
            recent = "\n".join(f"    {i}: {ops[i]!r}" for i in range(start, index + 1))
            raise TraceMismatch(
                f"{exc.args[0]}\n  (config {config['name']}: num_blocks={config['num_blocks']}, "
                f"block_size={config['block_size']}; operation {index}; the last operations:\n"
                f"{recent})") from None
    if len(trace) != len(ops):
        raise TraceMismatch(f"the trace stopped after {len(trace)} of {len(ops)} operations")


def judge_all(config: dict, sequences: list[list[tuple]], traces: list[list[dict]]) -> None:
    """Judge every trace of one config; the first failure is raised."""
    if len(traces) != len(sequences):
        raise AssertionError(f"got {len(traces)} traces for {len(sequences)} sequences")
    for ops, trace in zip(sequences, traces, strict=True):
        judge_trace(config, ops, trace)


PLAIN_KINDS = ("append",) * 4 + ("allocate",) * 2 + ("fork", "fork_append", "fork_append", "free",
                                                   "can", "burst")
PREFIX_KINDS = PLAIN_KINDS + ("prompt",) * 4
NUM_CHUNKS = 3  # distinct full-block contents prompts are built from


# Hypothesis sometimes draws integer literals it finds in the source of loaded modules; which
# modules are loaded differs between runs (one suite or all, xdist or not), so integers are
# drawn from a range no literal falls in, and the offset removed.
DRAW_OFFSET = 7 * 10**40


def raw_ops(kinds: tuple[str, ...], max_ops: int) -> st.SearchStrategy:
    """Lists of raw operations; each is one drawn integer split into fields (`decode`), which
    keeps generation cheap: one draw per operation instead of seven."""
    draw = st.integers(DRAW_OFFSET, DRAW_OFFSET + 2**40 - 1)
    return st.lists(draw, min_size=min(8, max_ops), max_size=max_ops).map(
        lambda values: [decode(kinds, v - DRAW_OFFSET) for v in values])


def decode(kinds: tuple[str, ...], value: int) -> tuple:
    """(kind, a, b, n, validity, chunks, tail) from one integer.

    The integer is scrambled first: hypothesis favours small and boundary values, which would
    otherwise all decode to the same (invalid) operation.
    """
    value = (value * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
    fields = []
    for size in (len(kinds), 8, 8, 13, 10, 5, 6):
        value, field_value = divmod(value, size)
        fields.append(field_value)
    kind, a, b, n, validity, num_chunks, tail = fields
    chunks = []
    for _ in range(num_chunks % 4):
        value, chunk = divmod(value, NUM_CHUNKS)
        chunks.append(chunk)
    return kinds[kind], a, b, n, validity, chunks, tail


def prompt_tokens(chunks: list[int], tail: int, block_size: int) -> list[int]:
    """Full blocks of chunk contents, then `tail` more tokens; never empty.

    A chunk's tokens do not depend on its position, so two prompts can share block 1 while
    differing in block 0: only a hash that chains the prefix tells them apart.
    """
    tokens = [100 * (c + 1) + j for c in chunks for j in range(block_size)]
    tokens += [7 + j for j in range(tail % (block_size + 1))]
    return tokens or [7]


def concretize(config: dict, raw: list[tuple]) -> list[tuple]:  # noqa: C901
    model = Model(config["num_blocks"], config["block_size"], config.get("prefix", False))
    ops: list[tuple] = []

    def emit(op: tuple) -> None:
        ops.append(op)
        model.step(op)

    for kind, a, b, n, validity, chunks, tail in raw:
        live = sorted(model.tables)
        invalid = validity == 0
        new_id = next(i for i in range(len(live) + 1) if i not in model.tables)
        unknown = model.freed_ids[-1] if model.freed_ids and a % 2 and \
            model.freed_ids[-1] not in model.tables else 50 + a
        pick = live[a % len(live)] if live else None
        if pick is None and not invalid and kind not in ("can", "prompt"):
            kind = "prompt" if config.get("prefix") and a % 2 else "allocate"
        if kind == "allocate":
            if invalid:
                emit(("allocate", pick, 0) if pick is not None else ("allocate", new_id, -1 - n))
            else:
                emit(("allocate", new_id, n))
        elif kind in ("append", "burst"):
            if invalid or pick is None:
                emit(("append", unknown))
            else:
                for _ in range(1 if kind == "append" else 1 + n % 6):
                    emit(("append", pick))
        elif kind in ("fork", "fork_append"):
            if pick is None or (invalid and a % 2):
                emit(("fork", unknown, new_id))
            elif invalid:
                emit(("fork", pick, live[b % len(live)]))
            else:
                emit(("fork", pick, new_id))
                if kind == "fork_append":  # both sides write next: copy-on-write territory
                    for seq in (new_id, pick)[:1 + b % 2]:
                        if model.expected_error(("append", seq)) is None:
                            emit(("append", seq))
        elif kind == "free":
            emit(("free", unknown if invalid or pick is None else pick))
        elif kind == "can":
            emit(("can", -1 - n if invalid else n))
        elif kind == "prompt":
            tokens = prompt_tokens(chunks, tail, config["block_size"])
            if invalid and pick is not None and model.expected_error(
                    ("prompt", new_id, tokens)) is None:
                emit(("prompt", pick, tokens))
            elif invalid:
                emit(("prompt", new_id, []))
            else:
                emit(("prompt", new_id, tokens))
    for seq in sorted(model.tables):
        emit(("free", seq))
    return ops


def draw_sequences(config: dict, count: int, max_ops: int = 30) -> list[list[tuple]]:
    """`count` concrete sequences for `config`, the same ones on every run."""
    kinds = PREFIX_KINDS if config.get("prefix") else PLAIN_KINDS
    drawn: list[list[tuple]] = []

    @seed(config["seed"])
    @settings(max_examples=count, database=None, deadline=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(raw_ops(kinds, max_ops))
    def collect(raw: list[tuple]) -> None:
        drawn.append(concretize(config, raw))

    collect()
    return drawn


Job = tuple[dict[str, Any], list[list[tuple]]]  # (config, operation sequences)


@dataclass(frozen=True)
class JobRuns:
    """What one launch of named jobs returned: `outcomes[name]` is the rank's outcome of
    `jobs[name]` (its traces, or what it raised)."""

    jobs: Mapping[str, Job]
    outcomes: Mapping[str, dict[str, Any]]

    def judge(self, name: str) -> None:
        """Raise unless every trace of job `name` matches the reference model (a stub's
        NotImplementedError comes back as "not implemented")."""
        config, sequences = self.jobs[name]
        judge_all(config, sequences, job_traces(self.outcomes[name], config))


def run_jobs(launch: Callable[..., Any], jobs: Mapping[str, Job],
             timeout: float = 60.0) -> JobRuns:
    """Run every job's sequences in one launch of one rank (`_ranks.rank_run_ops`)."""
    payload = [{"config": config, "sequences": sequences} for config, sequences in jobs.values()]
    outcomes = launch(rank_run_ops, world_size=1, args=(payload,), timeout=timeout).values[0]
    return JobRuns(jobs, dict(zip(jobs, outcomes, strict=True)))


def job_tests(jobs: Mapping[str, Job], timeout: float = 60.0) -> CaseTests[JobRuns]:
    """The launch and the graded tests of a module whose tests each judge jobs
    (`harness.case_tests.CaseTests`):

        ALLOCATOR = job_tests({"boundary": (BOUNDARY, [BOUNDARY_OPS]), ...})
        case_runs = ALLOCATOR.fixture            # the module's launch: a JobRuns
        test_boundary = ALLOCATOR.test(3, "boundary")

    A test passes when each job it names matches the reference model, and exercises the
    classes their configs name (PrefixCachingAllocator when `prefix` is set, else
    BlockAllocator).
    """
    return CaseTests(
        run=lambda launch: run_jobs(launch, jobs, timeout),
        judge=lambda runs, name: runs.judge(name),
        exercises=lambda names: ["PrefixCachingAllocator" if jobs[name][0].get("prefix")
                                 else "BlockAllocator" for name in names])


# -- paged_attention cases -----------------------------------------------------------------------
def make_case(seed: int, lens: list[int], block_size: int, heads: int, kv_heads: int,
              dim: int, dtype: torch.dtype, extra_pad: int = 1, scale: float | None = None,
              num_blocks: int | None = None) -> dict:
    gen = seeded_generator(seed)
    needed = [-(-n // block_size) for n in lens]
    width = max(needed) + extra_pad
    num_blocks = num_blocks or sum(needed) + 3
    ids = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.full((len(lens), width), -1, dtype=torch.long)
    for b, count in enumerate(needed):
        tables[b, :count] = torch.tensor(ids[:count])
        ids = ids[count:]
    shape = (num_blocks, block_size, kv_heads, dim)
    case: dict[str, Any] = {"q": torch.randn(len(lens), heads, dim, generator=gen, dtype=dtype),
            "k_cache": torch.randn(shape, generator=gen, dtype=dtype) * 2,
            "v_cache": torch.randn(shape, generator=gen, dtype=dtype),
            "tables": tables, "lens": torch.tensor(lens, dtype=torch.long)}
    if scale is not None:
        case["scale"] = scale
    return case
