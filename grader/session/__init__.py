"""One graded pytest session: the plugin and the plugins it loads, the session's set-up, state,
event channel and per-test outcomes, the failure reasons it scrubs, the screen's gate, and the
runner that starts such a session in a subprocess and reads back what it recorded.

Layering (grader/tests/test_imports.py): imports `grader.report`, `grader.screen` and the top
level's shared modules; never the instructor's, pr or worksheet packages, bench or the CLI.
"""
