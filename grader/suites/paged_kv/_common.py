"""Parent side of the paged_kv suite's allocator tests: named jobs of operation sequences, run
in one launch and judged by the reference model.

A *job* is a config (`{"name", "num_blocks", "block_size"[, "prefix"]}`) and the operation
sequences to run on fresh allocators of it (see `_ranks.py` for the operations and what a
trace records). `run_jobs` sends every job of a test module to one rank in one launch; each job
keeps its own error scope there, so a stubbed PrefixCachingAllocator fails only its own jobs.
`JobRuns.judge(name)` judges one job's traces with `_model.judge_all`. `job_tests` makes a
module's launch fixture and its graded tests with the harness's `CaseTests`, one line per test
("job `name` is worth `points`").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grader.suites.paged_kv._model import judge_all
from grader.suites.paged_kv._ranks import job_traces, rank_run_ops
from harness.case_tests import CaseTests

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
