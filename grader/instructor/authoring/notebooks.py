"""Is the committed student worksheet what nbgrader makes of its source now? Decided without
running nbgrader (seconds of start-up): cell by cell, the same cells with the same grading
metadata, and the same text once the source's solution and hidden-test regions are taken out
and the student copy's "YOUR CODE HERE" stand-ins are dropped.
"""

from __future__ import annotations

from pathlib import Path

from grader.worksheets.grading import HIDDEN_MARKERS, SOLUTION_MARKERS
from grader.worksheets.nbgrade import cell_source, nbgrader_meta, read_notebook

# What nbgrader writes in place of a solution region.
_STAND_INS = {"# YOUR CODE HERE", "raise NotImplementedError()", "YOUR ANSWER HERE"}
_COMPARED_META = ("grade_id", "grade", "solution", "locked", "points")


def public_lines(text: str) -> list[str]:
    """The non-blank lines of a cell outside its solution and hidden-test regions, stripped
    at the right, without nbgrader's stand-ins."""
    kept, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in (SOLUTION_MARKERS[0], HIDDEN_MARKERS[0]):
            inside = True
        elif stripped in (SOLUTION_MARKERS[1], HIDDEN_MARKERS[1]):
            inside = False
        elif not inside and stripped and stripped not in _STAND_INS:
            kept.append(line.rstrip())
    return kept


def stale_release(source: Path, release: Path, assignment_id: str) -> list[str]:
    """Why `release` is not the student version of `source` (empty: it is)."""
    rerun = f"run `python -m grader worksheets release {assignment_id}`"
    ours, theirs = read_notebook(source)["cells"], read_notebook(release)["cells"]
    if len(ours) != len(theirs):
        return [f"the student worksheet has {len(theirs)} cells, its source {len(ours)}; {rerun}"]
    for number, (a, b) in enumerate(zip(ours, theirs), start=1):
        meta_a, meta_b = nbgrader_meta(a), nbgrader_meta(b)
        differs = [k for k in _COMPARED_META if meta_a.get(k) != meta_b.get(k)]
        if a.get("cell_type") != b.get("cell_type") or differs:
            return [f"cell {number} ({meta_a.get('grade_id', '?')}) differs from its source "
                    f"in {', '.join(differs) or 'type'}; {rerun}"]
        if public_lines(cell_source(a)) != public_lines(cell_source(b)):
            return [f"cell {number} ({meta_a.get('grade_id', '?')}) of the student worksheet "
                    f"is out of date with its source; {rerun}"]
    return []
