"""Registers the grading plugin for plain `pytest` runs from the repository root.

The trusted grader does not rely on this file: `python -m grader grade` runs pytest with
`--noconftest -p grader.session.plugin`, so a conftest.py added by a submission is never loaded.
"""

pytest_plugins = ["grader.session.plugin"]
