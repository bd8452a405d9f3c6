"""The output head gets a copy of the embedding instead of sharing it: same values at first,
two parameters, twice the memory, and they drift apart in training."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "tied"
mutate(globals(), "gpt", "model", replace=[
    ("        self.lm_head.weight = self.tok_emb.weight\n",
     "        self.lm_head.weight = nn.Parameter(self.tok_emb.weight.detach().clone())\n"),
])
