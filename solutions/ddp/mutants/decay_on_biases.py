"""Weight decay on every parameter: biases and norm weights are decayed too."""
from harness.mutation import mutate

MUTATES = "trainer"
FEEDBACK = "weight decay on matrices only"
mutate(globals(), "ddp", "trainer", replace=[
    ('{"params": no_decay, "weight_decay": 0.0}',
     '{"params": no_decay, "weight_decay": weight_decay}'),
])
