"""What only instructors run; a student release leaves this whole folder out.

`selfcheck` and `signatures` prove the suites; `release`, `release_leaks` and `release_files/`
write and leak-check the student repository; `worksheets` checks and regenerates worksheets;
`gradebook` keeps grades in nbgrader's gradebook; `rehearse` runs the grade workflow locally;
`adversarial` grades the attack corpus of grader/tests/adversarial/; `classview` is the class
report (`python -m grader class`).
"""
