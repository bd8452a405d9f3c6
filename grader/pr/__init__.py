"""Grading a pull request, one step per module, as the released grade workflow runs them:
`apply` (pr-apply), `grade` (pr-suites, pr-grade), `comment` (pr-comment), `post` (pr-post).
"""
