"""train_step walks its own 1F1B order, whose warm-up count is wrapped modulo m + 1 instead of
clamped to m: (p - stage - 1) % (m + 1). It equals min(p - stage - 1, m) wherever p - 1 <= m,
so only 4 stages with 2 micro-batches differ: stage 0 starts with no forward in flight while
stage 1 wants two, and the four stages wait in recv for ever. schedule() itself is right."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "check each stage's warm-up count"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("    for action, mb in schedule(kind, p, m, stage):",
     "    for action, mb in _step_order(kind, p, m, stage):"),
])


def _step_order(kind, p, m, stage):
    if kind != "1f1b":
        return schedule(kind, p, m, stage)  # defined by mutate()
    warmup = (p - stage - 1) % (m + 1)
    actions = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        actions += [("F", warmup + i), ("B", i)]
    return actions + [("B", i) for i in range(m - warmup, m)]
