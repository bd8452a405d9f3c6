"""RMSNorm adds eps to the RMS instead of the mean square: x / (sqrt(mean(x²)) + eps)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "inside the square root"
mutate(globals(), "gpt", "model", replace=[
    ("        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)",
     "        rstd = 1 / (torch.sqrt(xf.pow(2).mean(dim=-1, keepdim=True)) + self.eps)"),
])
