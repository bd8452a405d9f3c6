"""The nbgrader worksheets, as `python -m grader grade` grades them: `grading` turns grade cells
into report rows, `nbgrade` runs nbgrader, `nbworker` is the nbgrader process itself.
"""
