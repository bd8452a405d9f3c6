"""round_to lets torch do the rounding: `x.to(<format's dtype>).to(torch.float32)`. The values
are exactly right (it is the suite's own reference), but the contract forbids the cast: the
exercise is to round on float32's bits (README §3)."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "may not cast"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("    mant_bits, emin, max_finite, saturates = _FORMATS[fmt]\n    raw = ",
     "    dtype = {\"bf16\": torch.bfloat16, \"fp16\": torch.float16,\n"
     "             \"e4m3\": torch.float8_e4m3fn, \"e5m2\": torch.float8_e5m2}[fmt]\n"
     "    return x.to(dtype).to(torch.float32)\n"
     "    mant_bits, emin, max_finite, saturates = _FORMATS[fmt]\n    raw = "),
])
