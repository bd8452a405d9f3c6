"""`python -m grader class`: the instructor's view of a class, from the files grading writes.

Modules: `collect` (results.json files, validated, or a gradebook's scores), `stats` (per
assignment: score spread, points lost per test, frequent first lines), `similarity` (copydetect
pairs with the stubs as boilerplate), `render` (HTML, CSV, PNG), `cli` (the command), and
`synthetic` (a class built from the course's own implementations, for tests and the benchmark).
"""

from grader.instructor.classview.cli import register

__all__ = ["register"]
