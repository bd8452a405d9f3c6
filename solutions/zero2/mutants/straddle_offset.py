"""A parameter cut by a shard boundary reads its second piece from its own start again."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = "cut by the shard boundary"
mutate(globals(), "zero2", "zero", replace=[
    ("pieces.append(_Piece(k, row, a - edges[k], base + a - start, b - a))",
     "pieces.append(_Piece(k, row, a - edges[k], a - lo, b - a))"),
])
