"""Checks only the first parameter's gradient for inf/NaN: an overflow elsewhere is missed."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = ("every parameter", "not only the first")
mutate(globals(), "mixed_precision", "amp", replace=[
    ("                if not bool(torch.isfinite(param.grad).all()):",
     "                if param is optimizer.param_groups[0][\"params\"][0] and \\\n"
     "                        not bool(torch.isfinite(param.grad).all()):"),
])
