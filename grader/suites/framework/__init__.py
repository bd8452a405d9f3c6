"""Hidden suite of framework (never shipped to students)."""
