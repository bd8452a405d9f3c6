"""Benchmarks that serve instructors only, run as `python -m grader bench <name>` (see
`grader/bench/__init__.py`); like the rest of `grader/instructor/`, not in a student release."""
