"""Hidden suite of nd_parallel (never shipped to students)."""
