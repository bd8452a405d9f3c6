"""step() always unscales, even after the user called unscale_ (to clip gradients): the
gradients are divided by the scale twice."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "unscale applied twice"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("        if id(optimizer) not in self._found_inf:\n            self.unscale_(optimizer)\n",
     "        earlier = self._found_inf.pop(id(optimizer), False)\n"
     "        self.unscale_(optimizer)\n"
     "        self._found_inf[id(optimizer)] |= earlier\n"),
])
