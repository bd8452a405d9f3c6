"""What one graded run produced and every form it is shown in: `RunResult` and its score
(`results`), Gradescope's results.json (`gradescope`), summary.md, junit.xml and the terminal
table (`render`), and the Markdown escaping of text a submission may have written
(`markdown_safe`).

Layering (grader/tests/test_imports.py): imports nothing else of the grader; a report is built
from a finished run, never from the session that made it.
"""
