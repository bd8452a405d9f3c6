"""The static screen: a submission's files read as text and parsed with `ast`, never imported
or run. `scan` walks them and gives the verdict, `rules` says what each rule screens, `files`
which files an implementation is made of, `kernels` the rule for Triton kernel wrappers. Its
gate in a graded session is `grader/session/screen_gate.py`.

Layering (grader/tests/test_imports.py): imports nothing else of the grader.
"""
