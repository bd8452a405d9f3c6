"""Authoring tools: `grader new` scaffolds an assignment, `grader doctor` checks one.

`artefacts` is the file table of docs/authoring.md as data (derived from the manifest entry),
`checks` the doctor's checks, `doctor` and `new` the commands.
"""

from __future__ import annotations

import argparse

from grader.instructor.authoring.doctor import register_doctor
from grader.instructor.authoring.new import register_new


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader doctor` and `python -m grader new`."""
    register_doctor(sub)
    register_new(sub)
