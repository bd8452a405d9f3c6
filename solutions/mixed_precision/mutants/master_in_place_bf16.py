"""Steps the optimizer on the bf16 weights themselves, keeping the master copies only for show:
every update below half a bf16 ulp is lost."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "tiny updates were lost"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("        self.optimizer.step()\n        for model, master in zip(self.model_params, "
     "self.master_params):\n            # One rounding per step, fp32 -> bf16 to nearest even.\n"
     "            model.copy_(master)\n",
     "        self.optimizer.step()\n        for model, master in zip(self.model_params, "
     "self.master_params):\n            model.copy_(model.float() - (model.float() - master)"
     ".to(torch.bfloat16))\n            master.copy_(model)\n"),
])
