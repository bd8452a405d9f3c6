"""Mutation testing of the suites: generated mutants of each solution, run, scored, reported.

`python -m grader mutate <id>` (grader/instructor/mutate/cli.py). Modules: `operators` (what a
mutant changes), `generate` (the mutants of an assignment, named and deterministic), `equivalents`
(the reviewed list of equivalent mutants), `runner` (grading mutant folders through a pluggable
engine), `report` (score, survivors, Markdown), `summary` (the committed summary and its
staleness check).
"""

from grader.instructor.mutate.cli import register

__all__ = ["register"]
