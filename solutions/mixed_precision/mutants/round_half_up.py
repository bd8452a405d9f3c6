"""Rounds ties away from zero (half up on the magnitude) instead of to even: the classic
`(bits + half) >> drop`. Off by one ulp on every exact midpoint."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = ("ties", "even")
mutate(globals(), "mixed_precision", "amp", replace=[
    ("kept = (significand + half - 1 + is_odd) >> drop", "kept = (significand + half) >> drop"),
])
